// Package secrets loads the secrets of `booking serve`: the master keys that
// wrap the per-order data keys (BOOKING_MASTER_KEYS or
// BOOKING_MASTER_KEYS_FILE) and the payment provider's secret API key
// (BOOKING_STRIPE_SECRET_KEY or BOOKING_STRIPE_SECRET_KEY_FILE, or their
// older names BOOKING_PROVIDER_API_KEY and BOOKING_PROVIDER_API_KEY_FILE).
//
// Each secret comes either from its variable or from the file its _FILE
// variable names, never both; surrounding white space is trimmed. In dev
// mode (neither BOOKING_PROVIDER_URL nor a Stripe secret key: the provider
// simulator runs in-process) missing secrets are made up: a master key
// generated once into the data directory, and a fresh random API key that
// the simulator then requires. Values are never logged or echoed in errors;
// every error is a *configerr.Error naming the variable at fault.
package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/commands/envelope"
)

// Config holds the secret settings as given, from the environment or flags
// (the struct tags are the command line's, for kong). Never log it.
type Config struct {
	StripeSecretKey     string `name:"stripe-secret-key" env:"BOOKING_STRIPE_SECRET_KEY" help:"Stripe secret API key (sk_live_…, sk_test_… or a restricted rk_… key), sent to the provider as Authorization: Bearer (the simulator too); without BOOKING_PROVIDER_URL it selects Stripe's API. Prefer the _FILE variable."`
	StripeSecretKeyFile string `name:"stripe-secret-key-file" env:"BOOKING_STRIPE_SECRET_KEY_FILE" help:"File holding the Stripe secret key (instead of BOOKING_STRIPE_SECRET_KEY)."`
	ProviderAPIKey      string `name:"provider-api-key" env:"BOOKING_PROVIDER_API_KEY" help:"Older name of the provider's secret API key: sent like BOOKING_STRIPE_SECRET_KEY, but never selects Stripe's API by itself (dev mode then gives it to the in-process simulator, which generates one otherwise)."`
	ProviderAPIKeyFile  string `name:"provider-api-key-file" env:"BOOKING_PROVIDER_API_KEY_FILE" help:"File holding the provider API key (instead of BOOKING_PROVIDER_API_KEY)."`
	MasterKeys          string `name:"master-keys" env:"BOOKING_MASTER_KEYS" help:"Master keys wrapping the per-order data keys: id:base64(32 bytes)[,id:base64...]; the first wraps, all unwrap. Required with BOOKING_PROVIDER_URL; dev mode generates one in BOOKING_DATA_DIR. Prefer the _FILE variable."`
	MasterKeysFile      string `name:"master-keys-file" env:"BOOKING_MASTER_KEYS_FILE" help:"File holding the master keys, one id:base64 a line (instead of BOOKING_MASTER_KEYS)."`
}

// DevMasterKeyFile is the name of the master key file dev mode generates in
// BOOKING_DATA_DIR when no master keys are configured.
const DevMasterKeyFile = "master-keys"

// maxSecretFile bounds a secret file's size, in bytes.
const maxSecretFile = 64 << 10

// Source is where a secret came from, for the start log line.
type Source string

// The sources of a secret; the zero Source means there is none.
const (
	FromVariable  Source = "variable"
	FromFile      Source = "file"
	FromDataDir   Source = "data directory (dev mode)"
	FromGenerated Source = "generated (dev mode)"
)

// String is how the start log line shows a secret: where it came from
// ("none" for the zero Source), never its value.
func (s Source) String() string {
	if s == "" {
		return "none"
	}
	return string(s)
}

// errMasterKeysRequired refuses a real provider without master keys.
func errMasterKeysRequired() error {
	return configerr.New("BOOKING_MASTER_KEYS", "required with a real provider (Stripe's API or BOOKING_PROVIDER_URL): "+
		"id:base64[,id:base64...] of 32-byte keys, or BOOKING_MASTER_KEYS_FILE naming a file of them")
}

// StripeKeySet reports whether a Stripe secret key is configured
// (BOOKING_STRIPE_SECRET_KEY or its _FILE variable): without
// BOOKING_PROVIDER_URL it selects Stripe's API.
func (c *Config) StripeKeySet() bool { return c.StripeSecretKey != "" || c.StripeSecretKeyFile != "" }

// ProviderKeySet reports whether the provider's API key is configured
// under any of its names.
func (c *Config) ProviderKeySet() bool {
	return c.StripeKeySet() || c.ProviderAPIKey != "" || c.ProviderAPIKeyFile != ""
}

// Check validates what can be checked without reading files: not both a
// variable and its _FILE variable, one name of the provider's API key at a
// time, a well-formed BOOKING_MASTER_KEYS, and master keys configured
// unless dev is true (dev mode: the simulator in-process).
func (c *Config) Check(dev bool) error {
	if c.StripeSecretKey != "" && c.StripeSecretKeyFile != "" {
		return configerr.New("BOOKING_STRIPE_SECRET_KEY", "set either BOOKING_STRIPE_SECRET_KEY or BOOKING_STRIPE_SECRET_KEY_FILE, not both")
	}
	if c.StripeKeySet() && (c.ProviderAPIKey != "" || c.ProviderAPIKeyFile != "") {
		return configerr.New("BOOKING_STRIPE_SECRET_KEY", "set either BOOKING_STRIPE_SECRET_KEY (or _FILE) or its older name "+
			"BOOKING_PROVIDER_API_KEY (or _FILE), not both")
	}
	if c.ProviderAPIKey != "" && c.ProviderAPIKeyFile != "" {
		return configerr.New("BOOKING_PROVIDER_API_KEY", "set either BOOKING_PROVIDER_API_KEY or BOOKING_PROVIDER_API_KEY_FILE, not both")
	}
	if c.MasterKeys != "" && c.MasterKeysFile != "" {
		return configerr.New("BOOKING_MASTER_KEYS", "set either BOOKING_MASTER_KEYS or BOOKING_MASTER_KEYS_FILE, not both")
	}
	if c.MasterKeys != "" {
		if _, err := envelope.ParseKeyring(c.MasterKeys); err != nil {
			return configerr.New("BOOKING_MASTER_KEYS", "%v", err)
		}
	} else if c.MasterKeysFile == "" && !dev {
		return errMasterKeysRequired()
	}
	return nil
}

// readSecret returns the secret from value (variable valueVar) or from the
// file file (variable fileVar), trimmed of surrounding whitespace; ok is
// false when neither is set. Both set, an unreadable, oversized or empty
// file, or a blank value are errors naming the variable.
func readSecret(value, valueVar, file, fileVar string) (secret string, ok bool, src Source, err error) {
	switch {
	case value != "" && file != "":
		return "", false, "", configerr.New(valueVar, "set either %s or %s, not both", valueVar, fileVar)
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", false, "", configerr.New(fileVar, "%v", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
		if err != nil {
			return "", false, "", configerr.New(fileVar, "%v", err)
		}
		if len(b) > maxSecretFile {
			return "", false, "", configerr.New(fileVar, "the file %s is larger than %d bytes", file, maxSecretFile)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", false, "", configerr.New(fileVar, "the file %s is empty", file)
		}
		return s, true, FromFile, nil
	case value != "":
		s := strings.TrimSpace(value)
		if s == "" {
			return "", false, "", configerr.New(valueVar, "is blank")
		}
		return s, true, FromVariable, nil
	}
	return "", false, "", nil
}

// LoadMasterKeys returns the master keyring (the first key wraps, all
// unwrap): from BOOKING_MASTER_KEYS or BOOKING_MASTER_KEYS_FILE; in dev
// mode (dev true) without either, from dataDir/master-keys, which is
// generated (mode 0600) if absent. Without keys outside dev mode, or with an
// invalid list, it returns an error naming the variable (BOOKING_DATA_DIR
// for the dev file).
func (c *Config) LoadMasterKeys(dev bool, dataDir string) (*envelope.Keyring, Source, error) {
	s, ok, src, err := readSecret(c.MasterKeys, "BOOKING_MASTER_KEYS", c.MasterKeysFile, "BOOKING_MASTER_KEYS_FILE")
	if err != nil {
		return nil, "", err
	}
	variable := "BOOKING_MASTER_KEYS"
	if src == FromFile {
		variable = "BOOKING_MASTER_KEYS_FILE"
	}
	if !ok {
		if !dev {
			return nil, "", errMasterKeysRequired()
		}
		if s, src, err = devMasterKeys(dataDir); err != nil {
			return nil, "", configerr.New("BOOKING_DATA_DIR", "dev master key: %v", err)
		}
		variable = "BOOKING_DATA_DIR"
	}
	ring, err := envelope.ParseKeyring(s)
	if err != nil {
		return nil, "", configerr.New(variable, "%v", err)
	}
	return ring, src, nil
}

// devMasterKeys returns the content of dir/master-keys, first writing a
// freshly generated key there if the file does not exist. The file is
// created complete or not at all (written aside, then linked into place), so
// processes starting together agree on one key.
func devMasterKeys(dir string) (string, Source, error) {
	path := filepath.Join(dir, DevMasterKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		return string(b), FromDataDir, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	entry, err := envelope.GenerateMasterKey("dev-" + randomHex(4))
	if err != nil {
		return "", "", err
	}
	tmp, err := os.CreateTemp(dir, DevMasterKeyFile+".tmp-*")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(tmp.Name())
	content := "# dev-mode master key of booking serve (BOOKING_MASTER_KEYS format); keep it with the database\n" + entry + "\n"
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", "", err
	}
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return "", "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", "", err
	}
	if err := tmp.Close(); err != nil {
		return "", "", err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	return string(b), FromGenerated, nil
}

// LoadProviderKey returns the provider's secret API key from
// BOOKING_STRIPE_SECRET_KEY or BOOKING_STRIPE_SECRET_KEY_FILE, or from
// their older names BOOKING_PROVIDER_API_KEY and _FILE (Check refuses
// both). In dev mode (dev true) without one it generates a random
// "sk_test_dev_" key, which the in-process simulator then requires. A key
// must be printable ASCII without spaces (it travels in the Authorization
// header, RFC 6750). Empty outside dev mode means no Authorization header
// (a simulator or proxy that needs none).
func (c *Config) LoadProviderKey(dev bool) (string, Source, error) {
	value, valueVar, file, fileVar := c.StripeSecretKey, "BOOKING_STRIPE_SECRET_KEY", c.StripeSecretKeyFile, "BOOKING_STRIPE_SECRET_KEY_FILE"
	if !c.StripeKeySet() {
		value, valueVar, file, fileVar = c.ProviderAPIKey, "BOOKING_PROVIDER_API_KEY", c.ProviderAPIKeyFile, "BOOKING_PROVIDER_API_KEY_FILE"
	}
	key, ok, src, err := readSecret(value, valueVar, file, fileVar)
	if err != nil {
		return "", "", err
	}
	if !ok {
		if !dev {
			return "", "", nil
		}
		return "sk_test_dev_" + randomHex(16), FromGenerated, nil
	}
	variable := valueVar
	if src == FromFile {
		variable = fileVar
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return "", "", configerr.New(variable, "the key must be printable ASCII without spaces (character %d is not)", i+1)
		}
	}
	return key, src, nil
}

// randomHex returns n random bytes in hexadecimal.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
