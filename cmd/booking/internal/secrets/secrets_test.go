package secrets

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/commands/envelope/envelopetest"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// setup is a secret configuration with its mode: dev is true without
// BOOKING_PROVIDER_URL (the simulator in-process).
type setup struct {
	Config
	dev bool
}

func TestMasterKeysConfig(t *testing.T) {
	t.Parallel()
	short := "k:" + base64.StdEncoding.EncodeToString(make([]byte, 16))
	tests := []struct {
		name    string
		mod     func(s *setup)
		wantErr string // "" = valid; otherwise the variable the error names
	}{
		{"Dev mode needs no master keys.", func(s *setup) {}, ""},
		{"A real provider without master keys is refused.", func(s *setup) { s.dev = false }, "BOOKING_MASTER_KEYS"},
		{"A real provider with master keys starts.", func(s *setup) { s.dev, s.MasterKeys = false, envelopetest.MasterKey(t, "k1") }, ""},
		{"A real provider with a master key file starts.", func(s *setup) {
			s.dev, s.MasterKeysFile = false, writeFile(t, envelopetest.MasterKey(t, "k1")+"\n")
		}, ""},
		{"Both the variable and the file are refused.", func(s *setup) {
			s.MasterKeys, s.MasterKeysFile = envelopetest.MasterKey(t, "k1"), writeFile(t, envelopetest.MasterKey(t, "k2"))
		}, "BOOKING_MASTER_KEYS"},
		{"A short key is refused.", func(s *setup) { s.MasterKeys = short }, "BOOKING_MASTER_KEYS"},
		{"A missing key file is refused.", func(s *setup) { s.MasterKeysFile = filepath.Join(t.TempDir(), "none") }, "BOOKING_MASTER_KEYS_FILE"},
		{"An empty key file is refused.", func(s *setup) { s.MasterKeysFile = writeFile(t, "\n") }, "BOOKING_MASTER_KEYS_FILE"},
		{"A key file with a bad entry is refused.", func(s *setup) { s.MasterKeysFile = writeFile(t, envelopetest.MasterKey(t, "a")+"\n"+short) }, "BOOKING_MASTER_KEYS_FILE"},
		{"Both provider key variables are refused.", func(s *setup) {
			s.ProviderAPIKey, s.ProviderAPIKeyFile = "sk_1", writeFile(t, "sk_2")
		}, "BOOKING_PROVIDER_API_KEY"},
		{"A provider key with a space is refused.", func(s *setup) { s.ProviderAPIKey = "sk test" }, "BOOKING_PROVIDER_API_KEY"},
		{"A provider key file with a control character is refused.", func(s *setup) { s.ProviderAPIKeyFile = writeFile(t, "sk_\x01x") }, "BOOKING_PROVIDER_API_KEY_FILE"},
		{"A missing provider key file is refused.", func(s *setup) { s.ProviderAPIKeyFile = filepath.Join(t.TempDir(), "none") }, "BOOKING_PROVIDER_API_KEY_FILE"},
		{"Both Stripe key variables are refused.", func(s *setup) {
			s.StripeSecretKey, s.StripeSecretKeyFile = "sk_1", writeFile(t, "sk_2")
		}, "BOOKING_STRIPE_SECRET_KEY"},
		{"A Stripe key and its older name together are refused.", func(s *setup) {
			s.StripeSecretKey, s.ProviderAPIKey = "sk_1", "sk_1"
		}, "BOOKING_STRIPE_SECRET_KEY"},
		{"A Stripe key with a space is refused.", func(s *setup) { s.StripeSecretKey = "sk test" }, "BOOKING_STRIPE_SECRET_KEY"},
		{"A missing Stripe key file is refused.", func(s *setup) { s.StripeSecretKeyFile = filepath.Join(t.TempDir(), "none") }, "BOOKING_STRIPE_SECRET_KEY_FILE"},
		{"A Stripe key file starts.", func(s *setup) {
			s.dev, s.MasterKeys, s.StripeSecretKeyFile = false, envelopetest.MasterKey(t, "k1"), writeFile(t, "sk_test_1\n")
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := setup{dev: true}
			tt.mod(&s)
			err := s.Check(s.dev)
			if err == nil {
				_, _, err = s.LoadMasterKeys(s.dev, t.TempDir())
			}
			if err == nil {
				_, _, err = s.LoadProviderKey(s.dev)
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
			for _, secret := range []string{s.MasterKeys, short[2:], "sk test", "sk_1"} {
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
	var c Config
	dir := t.TempDir()
	r1, src, err := c.LoadMasterKeys(true, dir)
	if err != nil || src != FromGenerated {
		t.Fatalf("LoadMasterKeys (first start) = %v, %v; want a generated key", src, err)
	}
	info, err := os.Stat(filepath.Join(dir, DevMasterKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("dev master key file mode = %v, want 0600", perm)
	}
	r2, src, err := c.LoadMasterKeys(true, dir)
	if err != nil || src != FromDataDir {
		t.Fatalf("LoadMasterKeys (restart) = %v, %v; want the data directory's key", src, err)
	}
	dk := envelope.NewDataKey()
	w := r1.Wrap(dk, []byte("aad"))
	if _, err := r2.Unwrap(w, []byte("aad")); err != nil || r1.PrimaryID() != r2.PrimaryID() || !strings.HasPrefix(r1.PrimaryID(), "dev-") {
		t.Errorf("the restarted keyring %s does not unwrap what %s wrapped: %v", r2.PrimaryID(), r1.PrimaryID(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data directory holds %d entries, want only %s (no temporary files left)", len(entries), DevMasterKeyFile)
	}
	// Configured keys win over the dev file.
	c.MasterKeys = envelopetest.MasterKey(t, "ops-1")
	r3, src, err := c.LoadMasterKeys(true, dir)
	if err != nil || src != FromVariable || r3.PrimaryID() != "ops-1" {
		t.Errorf("LoadMasterKeys with BOOKING_MASTER_KEYS = %v, %v, %v; want ops-1 from the variable", r3, src, err)
	}
}

func TestProviderAPIKey(t *testing.T) {
	t.Parallel()
	var c Config
	k1, src, err := c.LoadProviderKey(true)
	if err != nil || src != FromGenerated || !strings.HasPrefix(k1, "sk_test_dev_") {
		t.Fatalf("dev mode without a key = %q, %v, %v; want a generated sk_test_dev_ key", k1, src, err)
	}
	if k2, _, _ := c.LoadProviderKey(true); k2 == k1 {
		t.Errorf("two generated keys are equal")
	}
	c.ProviderAPIKeyFile = writeFile(t, "  sk_live_from_file\n")
	if k, src, err := c.LoadProviderKey(true); err != nil || k != "sk_live_from_file" || src != FromFile {
		t.Errorf("key from file = %q, %v, %v; want sk_live_from_file (trimmed)", k, src, err)
	}
	c.ProviderAPIKeyFile = ""
	if k, src, err := c.LoadProviderKey(false); err != nil || k != "" || src != "" || src.String() != "none" {
		t.Errorf("a real provider without a key = %q, %v, %v; want none", k, src, err)
	}
	c.StripeSecretKey = "sk_test_stripe"
	if k, src, err := c.LoadProviderKey(false); err != nil || k != "sk_test_stripe" || src != FromVariable || !c.StripeKeySet() || !c.ProviderKeySet() {
		t.Errorf("BOOKING_STRIPE_SECRET_KEY = %q, %v, %v; want sk_test_stripe from the variable", k, src, err)
	}
	c = Config{ProviderAPIKey: "sk_test_alias"}
	if k, _, err := c.LoadProviderKey(true); err != nil || k != "sk_test_alias" || c.StripeKeySet() || !c.ProviderKeySet() {
		t.Errorf("BOOKING_PROVIDER_API_KEY in dev mode = %q, %v; want the alias's key, which selects no Stripe API", k, err)
	}
}
