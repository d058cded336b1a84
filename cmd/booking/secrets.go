package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrysafe/booking/commands/envelope"
)

// Secrets of `booking serve`: the master keys that wrap the per-order data
// keys (BOOKING_MASTER_KEYS or BOOKING_MASTER_KEYS_FILE) and the provider's
// API key (BOOKING_PROVIDER_API_KEY or BOOKING_PROVIDER_API_KEY_FILE). Each
// comes either from the variable or from the file it names, never both.
// Values are never logged or echoed in errors.

// devMasterKeyFile is the master key file dev mode generates in
// BOOKING_DATA_DIR when no master keys are configured.
const devMasterKeyFile = "master-keys"

// maxSecretFile bounds a secret file's size.
const maxSecretFile = 64 << 10

// secretSource is where a secret came from, for the start log line.
type secretSource string

const (
	fromVariable  secretSource = "variable"
	fromFile      secretSource = "file"
	fromDataDir   secretSource = "data directory (dev mode)"
	fromGenerated secretSource = "generated (dev mode)"
)

// readSecret returns the secret from value (variable valueVar) or from the
// file file (variable fileVar), trimmed of surrounding whitespace; ok is
// false when neither is set. Both set, an unreadable or empty file, or an
// empty value are errors naming the variable.
func readSecret(value, valueVar, file, fileVar string) (secret string, ok bool, src secretSource, err error) {
	switch {
	case value != "" && file != "":
		return "", false, "", configError(valueVar, "set either %s or %s, not both", valueVar, fileVar)
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", false, "", configError(fileVar, "%v", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
		if err != nil {
			return "", false, "", configError(fileVar, "%v", err)
		}
		if len(b) > maxSecretFile {
			return "", false, "", configError(fileVar, "the file %s is larger than %d bytes", file, maxSecretFile)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", false, "", configError(fileVar, "the file %s is empty", file)
		}
		return s, true, fromFile, nil
	case value != "":
		s := strings.TrimSpace(value)
		if s == "" {
			return "", false, "", configError(valueVar, "is blank")
		}
		return s, true, fromVariable, nil
	}
	return "", false, "", nil
}

// loadMasterKeys returns the master keyring: from BOOKING_MASTER_KEYS or
// BOOKING_MASTER_KEYS_FILE; in dev mode without either, from
// BOOKING_DATA_DIR/master-keys, which is generated (mode 0600) if absent.
// Without keys outside dev mode, or with an invalid list, it returns an
// error naming the variable.
func loadMasterKeys(c *ServeConfig) (*envelope.Keyring, secretSource, error) {
	s, ok, src, err := readSecret(c.MasterKeys, "BOOKING_MASTER_KEYS", c.MasterKeysFile, "BOOKING_MASTER_KEYS_FILE")
	if err != nil {
		return nil, "", err
	}
	variable := "BOOKING_MASTER_KEYS"
	if src == fromFile {
		variable = "BOOKING_MASTER_KEYS_FILE"
	}
	if !ok {
		if c.ProviderURL != "" {
			return nil, "", configError("BOOKING_MASTER_KEYS", "required with a real provider (BOOKING_PROVIDER_URL): "+
				"id:base64[,id:base64...] of 32-byte keys, or BOOKING_MASTER_KEYS_FILE naming a file of them")
		}
		if s, src, err = devMasterKeys(c.DataDir); err != nil {
			return nil, "", configError("BOOKING_DATA_DIR", "dev master key: %v", err)
		}
		variable = "BOOKING_DATA_DIR"
	}
	ring, err := envelope.ParseKeyring(s)
	if err != nil {
		return nil, "", configError(variable, "%v", err)
	}
	return ring, src, nil
}

// devMasterKeys returns the content of dir/master-keys, first writing a
// freshly generated key there if the file does not exist. The file is
// created complete or not at all (written aside, then linked into place), so
// processes starting together agree on one key.
func devMasterKeys(dir string) (string, secretSource, error) {
	path := filepath.Join(dir, devMasterKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		return string(b), fromDataDir, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	id := make([]byte, 4)
	rand.Read(id)
	entry, err := envelope.GenerateMasterKey("dev-" + hex.EncodeToString(id))
	if err != nil {
		return "", "", err
	}
	tmp, err := os.CreateTemp(dir, devMasterKeyFile+".tmp-*")
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
	return string(b), fromGenerated, nil
}

// loadProviderAPIKey returns the provider's API key from
// BOOKING_PROVIDER_API_KEY or BOOKING_PROVIDER_API_KEY_FILE. In dev mode
// without one it generates a random key, which the in-process simulator
// then requires. A key must be printable ASCII without spaces (it travels
// in a header). Empty outside dev mode means no Authorization header.
func loadProviderAPIKey(c *ServeConfig) (string, secretSource, error) {
	key, ok, src, err := readSecret(c.ProviderAPIKey, "BOOKING_PROVIDER_API_KEY", c.ProviderAPIKeyFile, "BOOKING_PROVIDER_API_KEY_FILE")
	if err != nil {
		return "", "", err
	}
	if !ok {
		if c.ProviderURL != "" {
			return "", "", nil
		}
		b := make([]byte, 16)
		rand.Read(b)
		return "sk_test_dev_" + hex.EncodeToString(b), fromGenerated, nil
	}
	variable := "BOOKING_PROVIDER_API_KEY"
	if src == fromFile {
		variable = "BOOKING_PROVIDER_API_KEY_FILE"
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return "", "", configError(variable, "the key must be printable ASCII without spaces (character %d is not)", i+1)
		}
	}
	return key, src, nil
}

// describeSecret is how the start log line shows a secret: where it came
// from, never its value.
func describeSecret(src secretSource) string {
	if src == "" {
		return "none"
	}
	return fmt.Sprint(src)
}
