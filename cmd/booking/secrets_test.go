package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/booking/commands/envelope"
)

// validServe returns a valid dev-mode configuration with its data directory
// in a fresh temporary folder.
func validServe(t *testing.T) ServeConfig {
	t.Helper()
	return ServeConfig{DatabaseURL: "postgres://u@127.0.0.1:1/db", HTTPAddr: "127.0.0.1:0", EventStore: "postgres",
		NATSAddr: "127.0.0.1:0", NATSDuplicateWindow: 600e9, ProviderSimAddr: "127.0.0.1:0", APITokens: "a=tok-a",
		DataDir: t.TempDir(), IntentRetention: 86400e9, IntentLease: 5e9, ReservationHold: 600e9, PaymentLease: 30e9,
		ProviderTimeout: 10e9, ProviderWindow: 86400e9, PaymentDeadline: 900e9, RecoveryInterval: 30e9, InUseWait: 2e9,
		RetryBudgetRate: 20, RetryBudgetBurst: 40, HTTPReadTimeout: 15e9}
}

func genKey(t *testing.T, id string) string {
	t.Helper()
	e, err := envelope.GenerateMasterKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMasterKeysConfig(t *testing.T) {
	t.Parallel()
	short := "k:" + base64.StdEncoding.EncodeToString(make([]byte, 16))
	tests := []struct {
		name    string
		mod     func(c *ServeConfig)
		wantErr string // "" = valid; otherwise the variable the error names
	}{
		{"Dev mode needs no master keys.", func(c *ServeConfig) {}, ""},
		{"A real provider without master keys is refused.", func(c *ServeConfig) {
			c.ProviderURL, c.ProviderWebhookSecret = "https://provider.invalid", "whsec"
		}, "BOOKING_MASTER_KEYS"},
		{"A real provider with master keys starts.", func(c *ServeConfig) {
			c.ProviderURL, c.ProviderWebhookSecret, c.MasterKeys = "https://provider.invalid", "whsec", genKey(t, "k1")
		}, ""},
		{"A real provider with a master key file starts.", func(c *ServeConfig) {
			c.ProviderURL, c.ProviderWebhookSecret, c.MasterKeysFile = "https://provider.invalid", "whsec", writeFile(t, genKey(t, "k1")+"\n")
		}, ""},
		{"Both the variable and the file are refused.", func(c *ServeConfig) {
			c.MasterKeys, c.MasterKeysFile = genKey(t, "k1"), writeFile(t, genKey(t, "k2"))
		}, "BOOKING_MASTER_KEYS"},
		{"A short key is refused.", func(c *ServeConfig) { c.MasterKeys = short }, "BOOKING_MASTER_KEYS"},
		{"A missing key file is refused.", func(c *ServeConfig) { c.MasterKeysFile = filepath.Join(t.TempDir(), "none") }, "BOOKING_MASTER_KEYS_FILE"},
		{"An empty key file is refused.", func(c *ServeConfig) { c.MasterKeysFile = writeFile(t, "\n") }, "BOOKING_MASTER_KEYS_FILE"},
		{"A key file with a bad entry is refused.", func(c *ServeConfig) { c.MasterKeysFile = writeFile(t, genKey(t, "a")+"\n"+short) }, "BOOKING_MASTER_KEYS_FILE"},
		{"Both provider key variables are refused.", func(c *ServeConfig) {
			c.ProviderAPIKey, c.ProviderAPIKeyFile = "sk_1", writeFile(t, "sk_2")
		}, "BOOKING_PROVIDER_API_KEY"},
		{"A provider key with a space is refused.", func(c *ServeConfig) { c.ProviderAPIKey = "sk test" }, "BOOKING_PROVIDER_API_KEY"},
		{"A provider key file with a control character is refused.", func(c *ServeConfig) { c.ProviderAPIKeyFile = writeFile(t, "sk_\x01x") }, "BOOKING_PROVIDER_API_KEY_FILE"},
		{"A missing provider key file is refused.", func(c *ServeConfig) { c.ProviderAPIKeyFile = filepath.Join(t.TempDir(), "none") }, "BOOKING_PROVIDER_API_KEY_FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validServe(t)
			tt.mod(&c)
			err := c.Validate()
			if err == nil {
				_, _, err = loadMasterKeys(&c)
			}
			if err == nil {
				_, _, err = loadProviderAPIKey(&c)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("configuration error = %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "invalid configuration: "+tt.wantErr+":") {
				t.Fatalf("configuration error = %v, want one naming %s", err, tt.wantErr)
			}
			for _, secret := range []string{c.MasterKeys, short[2:], "sk test", "sk_1"} {
				if secret != "" && strings.Contains(err.Error(), secret) {
					t.Errorf("the error shows a secret value: %v", err)
				}
			}
		})
	}
}

// TestDevMasterKey: dev mode generates one master key into the data
// directory (mode 0600) and reads the same key on every later start.
func TestDevMasterKey(t *testing.T) {
	t.Parallel()
	c := validServe(t)
	r1, src, err := loadMasterKeys(&c)
	if err != nil || src != fromGenerated {
		t.Fatalf("loadMasterKeys (first start) = %v, %v; want a generated key", src, err)
	}
	info, err := os.Stat(filepath.Join(c.DataDir, devMasterKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("dev master key file mode = %v, want 0600", perm)
	}
	r2, src, err := loadMasterKeys(&c)
	if err != nil || src != fromDataDir {
		t.Fatalf("loadMasterKeys (restart) = %v, %v; want the data directory's key", src, err)
	}
	dk := envelope.NewDataKey()
	w := r1.Wrap(dk, []byte("aad"))
	if _, err := r2.Unwrap(w, []byte("aad")); err != nil || r1.PrimaryID() != r2.PrimaryID() || !strings.HasPrefix(r1.PrimaryID(), "dev-") {
		t.Errorf("the restarted keyring %s does not unwrap what %s wrapped: %v", r2.PrimaryID(), r1.PrimaryID(), err)
	}
	entries, _ := os.ReadDir(c.DataDir)
	if len(entries) != 1 {
		t.Errorf("data directory holds %d entries, want only %s (no temporary files left)", len(entries), devMasterKeyFile)
	}
	// Configured keys win over the dev file.
	c.MasterKeys = genKey(t, "ops-1")
	r3, src, err := loadMasterKeys(&c)
	if err != nil || src != fromVariable || r3.PrimaryID() != "ops-1" {
		t.Errorf("loadMasterKeys with BOOKING_MASTER_KEYS = %v, %v, %v; want ops-1 from the variable", r3, src, err)
	}
}

func TestProviderAPIKey(t *testing.T) {
	t.Parallel()
	c := validServe(t)
	k1, src, err := loadProviderAPIKey(&c)
	if err != nil || src != fromGenerated || !strings.HasPrefix(k1, "sk_test_dev_") {
		t.Fatalf("dev mode without a key = %q, %v, %v; want a generated sk_test_dev_ key", k1, src, err)
	}
	if k2, _, _ := loadProviderAPIKey(&c); k2 == k1 {
		t.Errorf("two generated keys are equal")
	}
	c.ProviderAPIKeyFile = writeFile(t, "  sk_live_from_file\n")
	if k, src, err := loadProviderAPIKey(&c); err != nil || k != "sk_live_from_file" || src != fromFile {
		t.Errorf("key from file = %q, %v, %v; want sk_live_from_file (trimmed)", k, src, err)
	}
	c.ProviderAPIKeyFile, c.ProviderURL, c.ProviderWebhookSecret = "", "https://provider.invalid", "whsec"
	if k, src, err := loadProviderAPIKey(&c); err != nil || k != "" || src != "" {
		t.Errorf("a real provider without a key = %q, %v, %v; want none", k, src, err)
	}
}

// TestServeHelpNamesSecrets: booking serve --help documents every secret
// variable.
func TestServeHelpNamesSecrets(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("serve --help: %v", err)
	}
	for _, v := range []string{"BOOKING_MASTER_KEYS", "BOOKING_MASTER_KEYS_FILE", "BOOKING_PROVIDER_API_KEY", "BOOKING_PROVIDER_API_KEY_FILE"} {
		if !strings.Contains(stdout.String(), "$"+v) {
			t.Errorf("booking serve --help does not name %s:\n%s", v, stdout.String())
		}
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"provider-sim", "--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("provider-sim --help: %v", err)
	}
	if !strings.Contains(stdout.String(), "$BOOKING_PROVIDER_SIM_API_KEY") {
		t.Errorf("booking provider-sim --help does not name BOOKING_PROVIDER_SIM_API_KEY:\n%s", stdout.String())
	}
}
