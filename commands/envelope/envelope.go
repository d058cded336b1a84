// Package envelope is the envelope encryption that keeps payment secrets
// unreadable at rest: every order gets its own random data key (AES-256-GCM),
// the secrets of the order are sealed under it, and the data key itself is
// stored only wrapped (encrypted) by a master key. Deleting the wrapped data
// key makes everything sealed under it unreadable for good
// (crypto-shredding), wherever copies of the ciphertext live.
//
// Master keys form a Keyring: the first key wraps new data keys, every key
// unwraps (rotation: put a new key first, keep the old ones until nothing
// they wrapped is left). Every ciphertext is bound to associated data that
// names what it is (for example the order id and the field), so a ciphertext
// copied to another order or field fails to open.
//
// Only the standard library is used: crypto/aes and crypto/cipher's GCM with
// random 96-bit nonces (NIST SP 800-38D; cipher.NewGCMWithRandomNonce), and
// crypto/rand for keys. The package does no I/O and is safe for concurrent
// use.
package envelope

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size in bytes of master and data keys (AES-256).
const KeySize = 32

// formatV1 is the first byte of every ciphertext this package writes: the
// format (AES-256-GCM, 12-byte random nonce, 16-byte tag) so that a later
// format can be told apart.
const formatV1 = 1

// Errors. They never contain key material or plaintext.
var (
	// ErrDecrypt means a ciphertext did not open: it was altered, sealed
	// under another key, or bound to other associated data.
	ErrDecrypt = errors.New("envelope: ciphertext does not open under this key and associated data")
	// ErrUnknownMasterKey means a wrapped data key names a master key that
	// the keyring does not hold.
	ErrUnknownMasterKey = errors.New("envelope: unknown master key")
)

// DataKey is one order's data key. It seals and opens that order's secrets.
// Its bytes never leave the package except wrapped by a master key. Safe for
// concurrent use.
type DataKey struct {
	raw  [KeySize]byte
	aead cipher.AEAD
}

// NewDataKey returns a fresh random data key (crypto/rand).
func NewDataKey() *DataKey {
	var raw [KeySize]byte
	rand.Read(raw[:]) // never fails (crypto/rand, Go 1.24+)
	return mustDataKey(raw)
}

// DataKeyFromBytes returns the data key made of b, which must be KeySize
// bytes (for tests and fixtures; production keys come from NewDataKey and
// Keyring.Unwrap).
func DataKeyFromBytes(b []byte) (*DataKey, error) {
	if len(b) != KeySize {
		return nil, fmt.Errorf("envelope: a data key has %d bytes, not %d", KeySize, len(b))
	}
	return mustDataKey([KeySize]byte(b)), nil
}

func mustDataKey(raw [KeySize]byte) *DataKey {
	aead, err := newAEAD(raw[:])
	if err != nil {
		panic(err) // a KeySize key always makes an AES-256 cipher
	}
	return &DataKey{raw: raw, aead: aead}
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithRandomNonce(block)
}

// Seal encrypts and authenticates plaintext bound to aad, and returns the
// ciphertext: a format byte, the random nonce, the encrypted bytes and the
// tag (29 bytes more than plaintext). A data key must not seal more than 2^32
// messages; an order's key seals a handful.
func (k *DataKey) Seal(plaintext, aad []byte) []byte { return seal(k.aead, plaintext, aad) }

// Open returns the plaintext of a ciphertext made by Seal with the same key
// and aad, or ErrDecrypt.
func (k *DataKey) Open(ciphertext, aad []byte) ([]byte, error) { return open(k.aead, ciphertext, aad) }

func seal(aead cipher.AEAD, plaintext, aad []byte) []byte {
	out := make([]byte, 1, 1+len(plaintext)+aead.Overhead())
	out[0] = formatV1
	return aead.Seal(out, nil, plaintext, aad)
}

func open(aead cipher.AEAD, ciphertext, aad []byte) ([]byte, error) {
	if len(ciphertext) < 1+aead.Overhead() || ciphertext[0] != formatV1 {
		return nil, ErrDecrypt
	}
	pt, err := aead.Open(nil, nil, ciphertext[1:], aad)
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

// Wrapped is a data key encrypted by the master key KeyID.
type Wrapped struct {
	KeyID      string
	Ciphertext []byte
}

// masterKey is one master key of a keyring.
type masterKey struct {
	id   string
	aead cipher.AEAD
}

// Keyring holds the master keys. The first one wraps; every one unwraps.
// It is immutable and safe for concurrent use.
type Keyring struct {
	keys []masterKey
}

// MaxKeyIDLength bounds a master key id.
const MaxKeyIDLength = 64

// ParseKeyring parses a list of master keys "id:base64,id:base64" (entries
// may also be separated by newlines, as in a key file; blank lines and lines
// starting with # are skipped). An id is 1 to 64 characters of [A-Za-z0-9._-],
// unique in the list; a key is the standard or URL-safe base64 (padded or
// not) of KeySize random bytes. The first entry wraps new data keys. Errors
// name the entry by position and id, never the key bytes.
func ParseKeyring(s string) (*Keyring, error) {
	var entries []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, e := range strings.Split(line, ",") {
			if e = strings.TrimSpace(e); e != "" {
				entries = append(entries, e)
			}
		}
	}
	if len(entries) == 0 {
		return nil, errors.New("no master keys: want id:base64[,id:base64...]")
	}
	r := &Keyring{}
	seen := map[string]bool{}
	for i, e := range entries {
		id, b64, ok := strings.Cut(e, ":")
		if !ok {
			return nil, fmt.Errorf("entry %d: want id:base64", i+1)
		}
		if err := checkKeyID(id); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("entry %d: master key id %q appears twice", i+1, id)
		}
		seen[id] = true
		raw, err := decodeKey(b64)
		if err != nil {
			return nil, fmt.Errorf("entry %d (%s): %w", i+1, id, err)
		}
		aead, err := newAEAD(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %d (%s): %w", i+1, id, err)
		}
		r.keys = append(r.keys, masterKey{id: id, aead: aead})
	}
	return r, nil
}

func checkKeyID(id string) error {
	if id == "" || len(id) > MaxKeyIDLength {
		return fmt.Errorf("a master key id has 1 to %d characters", MaxKeyIDLength)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("master key id %q: only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("the key has %d bytes, want %d (base64 of 32 random bytes)", len(b), KeySize)
			}
			return b, nil
		}
	}
	return nil, errors.New("the key is not valid base64")
}

// GenerateMasterKey returns a new random master key entry "id:base64" (the
// format ParseKeyring reads), for dev mode and for operators. It returns an
// error for an invalid id.
func GenerateMasterKey(id string) (string, error) {
	if err := checkKeyID(id); err != nil {
		return "", err
	}
	var raw [KeySize]byte
	rand.Read(raw[:])
	return id + ":" + base64.StdEncoding.EncodeToString(raw[:]), nil
}

// PrimaryID returns the id of the master key that wraps new data keys.
func (r *Keyring) PrimaryID() string { return r.keys[0].id }

// IDs returns the ids of every master key, the primary first.
func (r *Keyring) IDs() []string {
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.id
	}
	return ids
}

// Has reports whether the keyring holds master key id.
func (r *Keyring) Has(id string) bool { return r.find(id) != nil }

func (r *Keyring) find(id string) *masterKey {
	for i := range r.keys {
		if r.keys[i].id == id {
			return &r.keys[i]
		}
	}
	return nil
}

// Wrap encrypts dk under the primary master key, bound to aad (for example
// the id of the order the key belongs to), and returns it with that master
// key's id.
func (r *Keyring) Wrap(dk *DataKey, aad []byte) Wrapped {
	k := r.keys[0]
	return Wrapped{KeyID: k.id, Ciphertext: seal(k.aead, dk.raw[:], aad)}
}

// Unwrap returns the data key that w wraps, opened with the master key
// w.KeyID and aad. Returns ErrUnknownMasterKey (wrapped, naming the id) if
// the keyring lacks that master key, or ErrDecrypt.
func (r *Keyring) Unwrap(w Wrapped, aad []byte) (*DataKey, error) {
	k := r.find(w.KeyID)
	if k == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownMasterKey, w.KeyID)
	}
	raw, err := open(k.aead, w.Ciphertext, aad)
	if err != nil {
		return nil, err
	}
	return DataKeyFromBytes(raw)
}
