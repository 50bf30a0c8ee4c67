package sign

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// maxKey bounds what is read of a key file.
const maxKey = 64 << 10

// Signer signs manifest digests in cosign's format with an ECDSA P-256 key, so that
// `cosign verify --key` checks them. Nothing goes to a transparency log.
type Signer struct {
	key *ecdsa.PrivateKey
}

// PasswordEnv holds the password of an encrypted cosign key, as cosign reads it.
const PasswordEnv = "COSIGN_PASSWORD"

// ParseKey reads an ECDSA P-256 private key in PEM: "EC PRIVATE KEY" (SEC 1, what `openssl
// ecparam -genkey` writes), an unencrypted "PRIVATE KEY" (PKCS #8), or cosign's encrypted key
// (what `cosign generate-key-pair` writes), which password opens; a nil password is none given.
// source names where it came from, for errors.
func ParseKey(data []byte, source string, password []byte) (*Signer, error) {
	bad := func(msg string) error {
		return &fault.Input{File: source, Message: msg,
			Hint: "give an ECDSA P-256 key in PEM: cosign's (`cosign generate-key-pair`, its password in " + PasswordEnv + "), or an unencrypted one, e.g. `openssl ecparam -name prime256v1 -genkey -noout -out toa-sign.key`; cosign verifies with its public key"}
	}
	if len(data) > maxKey {
		return nil, bad(fmt.Sprintf("is %d bytes, more than a key file holds", len(data)))
	}
	var block *pem.Block
	for rest := data; ; {
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, bad("holds no PEM private key")
		}
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			break
		}
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY":
		if password == nil {
			return nil, &fault.Input{File: source, Message: "is an encrypted cosign key, and " + PasswordEnv + " is not set",
				Hint: "set " + PasswordEnv + " to its password, as for `cosign sign`"}
		}
		der, derr := decryptCosignKey(block.Bytes, password)
		if derr != nil {
			return nil, &fault.Input{File: source, Message: "cannot be opened with the password in " + PasswordEnv + ": " + derr.Error(),
				Hint: "set " + PasswordEnv + " to the password the key was made with"}
		}
		key, err = x509.ParsePKCS8PrivateKey(der)
	case "ENCRYPTED PRIVATE KEY":
		return nil, bad("is an encrypted PKCS #8 key, which toa-push does not decrypt (`openssl pkcs8 -topk8 -nocrypt` writes it unencrypted)")
	default:
		return nil, bad("holds a " + block.Type + ", not an ECDSA private key")
	}
	if err != nil {
		return nil, bad("is not a key toa-push can read: " + err.Error())
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, bad("is not an ECDSA P-256 key")
	}
	return &Signer{key: ec}, nil
}

// encryptedKey is the body of cosign's encrypted key, as go-securesystemslib's encrypted package
// writes it (cosign pkg/cosign/keys.go): scrypt makes a key of the password and the salt, and a
// NaCl secretbox under that key holds the private key in PKCS #8.
type encryptedKey struct {
	KDF struct {
		Name   string `json:"name"`
		Params struct {
			N int `json:"N"`
			R int `json:"r"`
			P int `json:"p"`
		} `json:"params"`
		Salt []byte `json:"salt"`
	} `json:"kdf"`
	Cipher struct {
		Name  string `json:"name"`
		Nonce []byte `json:"nonce"`
	} `json:"cipher"`
	Ciphertext []byte `json:"ciphertext"`
}

// decryptCosignKey opens cosign's encrypted key. Only the scrypt costs go-securesystemslib writes
// are taken (N 2^15 to 2^17, r 8, p 1: at most 128 MiB of memory), so that a key file cannot ask
// for more.
func decryptCosignKey(data, password []byte) ([]byte, error) {
	var k encryptedKey
	if err := json.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("not cosign's encrypted key format: %w", err)
	}
	p := k.KDF.Params
	switch {
	case k.KDF.Name != "scrypt" || k.Cipher.Name != "nacl/secretbox":
		return nil, fmt.Errorf("made with %s and %s, where cosign uses scrypt and nacl/secretbox", k.KDF.Name, k.Cipher.Name)
	case p.R != 8 || p.P != 1 || (p.N != 1<<15 && p.N != 1<<16 && p.N != 1<<17):
		return nil, fmt.Errorf("scrypt parameters N=%d r=%d p=%d are not cosign's", p.N, p.R, p.P)
	case len(k.Cipher.Nonce) != 24:
		return nil, fmt.Errorf("the nonce is %d bytes, not 24", len(k.Cipher.Nonce))
	}
	boxKey, err := scrypt.Key(password, k.KDF.Salt, p.N, p.R, p.P, 32)
	if err != nil {
		return nil, err
	}
	var nonce [24]byte
	var key [32]byte
	copy(nonce[:], k.Cipher.Nonce)
	copy(key[:], boxKey)
	der, ok := secretbox.Open(nil, k.Ciphertext, &nonce, &key)
	if !ok {
		return nil, errors.New("the password does not open it")
	}
	return der, nil
}

// PublicKeyPEM is the public key as cosign's --key reads it.
func (s *Signer) PublicKeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(&s.key.PublicKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// KeyEnv holds a signing key's PEM (a CI secret) when --sign-key does not name one.
const KeyEnv = "TOA_SIGN_KEY"

// LoadKey reads the signing key that spec names: a file, or `env://NAME` for the PEM in the
// environment variable NAME (cosign's spelling). With spec "" the key is KeyEnv's when it is
// set, else there is none: nil, nil. An encrypted cosign key is opened with PasswordEnv's
// password, set (even empty, as cosign takes it) or not.
func LoadKey(spec string, lookupEnv func(string) (string, bool)) (*Signer, error) {
	var password []byte
	if p, ok := lookupEnv(PasswordEnv); ok {
		password = []byte(p)
	}
	if spec == "" {
		if pemData, _ := lookupEnv(KeyEnv); pemData != "" {
			return ParseKey([]byte(pemData), "$"+KeyEnv, password)
		}
		return nil, nil
	}
	if v, ok := strings.CutPrefix(spec, "env://"); ok {
		pemData, _ := lookupEnv(v)
		if pemData == "" {
			return nil, &fault.Input{Key: "--sign-key", Message: fmt.Sprintf("names the environment variable %s, which is not set or empty", v),
				Hint: "set it to the key's PEM, or give --sign-key a file"}
		}
		return ParseKey([]byte(pemData), "$"+v, password)
	}
	data, err := readKeyFile(spec, "--sign-key", "give --sign-key the file of an ECDSA P-256 private key in PEM")
	if err != nil {
		return nil, err
	}
	return ParseKey(data, spec, password)
}

// readKeyFile reads a key file flag names, bounded and without blocking: a FIFO there would
// block the open, a device the read.
func readKeyFile(file, flag, hint string) ([]byte, error) {
	data, err := fsys.ReadFile(file, maxKey)
	if fault.IsInput(err) {
		return nil, err
	}
	if err != nil {
		return nil, &fault.Input{File: file, Key: flag, Message: "cannot be read: " + err.Error(), Hint: hint}
	}
	return data, nil
}

// ReadPublicKey reads an ECDSA P-256 public key in PEM, as `cosign generate-key-pair` writes
// cosign.pub: what toa-apply's --verify-key names.
func ReadPublicKey(file string) (*ecdsa.PublicKey, error) {
	const hint = "give the public key toa-push's --sign-key pairs with (cosign.pub, or `openssl ec -in KEY -pubout`)"
	bad := func(msg string) error {
		return &fault.Input{File: file, Key: "--verify-key", Message: msg, Hint: hint}
	}
	data, err := readKeyFile(file, "--verify-key", hint)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, bad("holds no PEM public key")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, bad("is not a public key toa-apply can read: " + err.Error())
	}
	ec, ok := key.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, bad("is not an ECDSA P-256 public key")
	}
	return ec, nil
}

// PublicKey is the signer's public key.
func (s *Signer) PublicKey() *ecdsa.PublicKey { return &s.key.PublicKey }
