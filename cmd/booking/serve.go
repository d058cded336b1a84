package main

import (
	"context"
	"os"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/server"
)

// serveCmd is `booking serve`: its configuration, read from the
// environment and flags (config.Serve).
type serveCmd struct {
	config.Serve `embed:""`
}

// Run checks the configuration, loads the secrets, makes the logger and
// the authenticator, then opens the service's parts (server.Open) and runs
// it until the context is done (server.Server.Run), closing the parts at
// the end.
func (c *serveCmd) Run(e *env) error {
	cfg, err := c.Serve.Prepare()
	if err != nil {
		return err
	}
	dev := cfg.DevMode()
	opts := server.Options{Version: e.version}
	if opts.MasterKeys, opts.MasterKeysFrom, err = cfg.Secrets.LoadMasterKeys(dev, cfg.DataDir); err != nil {
		return err
	}
	if opts.ProviderAPIKey, opts.ProviderAPIKeyFrom, err = cfg.Secrets.LoadProviderKey(dev); err != nil {
		return err
	}
	if opts.Log, err = e.logger(cfg.Log); err != nil {
		return err
	}
	// A JWT authenticator refreshes its keys until the command ends.
	if opts.Auth, err = cfg.Auth.Authenticator(e.ctx, cfg.APITokens, opts.Log); err != nil {
		return err
	}
	var stopTracing func(context.Context) error
	if opts.TracerProvider, stopTracing, err = newTracing(e.ctx, os.Getenv, e.stdout); err != nil {
		return err
	}
	defer func() { // after the parts are closed: their last spans are flushed
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			opts.Log.Warn("tracing: the last spans were not exported", "err", err)
		}
	}()
	s, err := server.Open(e.ctx, cfg, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(e.ctx, e.stdout)
}
