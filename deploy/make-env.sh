#!/usr/bin/env bash
# make-env.sh — print a deploy/.env with fresh secrets for deploy/compose.yaml:
#   deploy/make-env.sh > deploy/.env && chmod 600 deploy/.env
# The master key wraps every order's data key: keep a copy (losing it makes pending
# payment tokens unreadable), and rotate it as docs/secrets.md, "Master keys", says.
set -euo pipefail
hex() { od -An -vtx1 -N"$1" /dev/urandom | tr -d ' \n'; }
cat <<ENV
# Secrets of the compose deployment (made by deploy/make-env.sh). Never commit this file.
POSTGRES_PASSWORD='$(hex 18)'
BOOKING_MASTER_KEYS='k$(date -u +%Y-%m):$(head -c 32 /dev/urandom | base64)'
BOOKING_PROVIDER_API_KEY='sk_test_$(hex 16)'
BOOKING_PROVIDER_WEBHOOK_SECRET='whsec_$(hex 24)'
# Bearer tokens: name=token[:admin], the name is the actor id.
BOOKING_API_TOKENS='alice=$(hex 16),bob=$(hex 16),admin=$(hex 16):admin'
BOOKING_DEPLOYMENT='compose'
GRAFANA_ADMIN_PASSWORD='$(hex 12)'
ENV
