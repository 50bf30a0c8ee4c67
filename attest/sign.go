package attest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/fsys"
)

// What cosign reads of a signature (sigstore/cosign v3: pkg/oci/static/signature.go,
// pkg/types/media.go, pkg/oci/remote/remote.go; the payload is sigstore/sigstore's
// pkg/signature/payload): the signatures of a manifest digest are the layers of the image tagged
// sha256-<hex>.sig in the same repository, each a simple-signing payload with its base64
// signature in an annotation.
const (
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	AnnotationSignature    = "dev.cosignproject.cosign/signature"
	// cosignSignatureType is the payload's critical.type.
	cosignSignatureType = "cosign container image signature"
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

// simpleSigning is cosign's payload (sigstore/sigstore pkg/signature/payload
// SimpleContainerImage), its fields in cosign's order.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// Payload is what is signed for the manifest digest in repository: cosign's simple-signing
// payload, naming the repository as cosign does by default.
func Payload(repository, digest string) ([]byte, error) {
	var p simpleSigning
	p.Critical.Identity.DockerReference = repository
	p.Critical.Image.DockerManifestDigest = digest
	p.Critical.Type = cosignSignatureType
	return json.Marshal(p)
}

// Sign signs the payload: ECDSA over its SHA-256, ASN.1 encoded, in base64 as cosign's
// annotation holds it. The signature is deterministic (RFC 6979): the same payload and key give
// the same bytes, so a signature image is reproducible like the images.
func (s *Signer) Sign(payload []byte) (string, error) {
	sum := sha256.Sum256(payload)
	sig, err := s.key.Sign(nil, sum[:], crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// verify says whether b64 is s's signature of payload.
func (s *Signer) verify(payload []byte, b64 string) bool {
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(payload)
	return ecdsa.VerifyASN1(&s.key.PublicKey, sum[:], sig)
}

// SignatureTag is the tag cosign looks for the signatures of digest under: "sha256-<hex>.sig".
func SignatureTag(repo name.Repository, digest string) (name.Tag, error) {
	return name.NewTag(repo.Name()+":"+strings.Replace(digest, ":", "-", 1)+".sig", name.Insecure)
}

// SignatureImage is the signature image for digest in repository: existing (the image under the
// signature tag, or nil) with a layer of s's signature added, as `cosign sign` adds one. It
// returns nil when existing already holds that signature: nothing to write.
func (s *Signer) SignatureImage(existing v1.Image, repository, digest string) (v1.Image, error) {
	payload, err := Payload(repository, digest)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		has, err := s.signed(existing, payload)
		if err != nil {
			return nil, fmt.Errorf("read the signatures of %s@%s: %w", repository, digest, err)
		}
		if has {
			return nil, nil
		}
	} else {
		// cosign's empty signature image (pkg/oci/empty): OCI media types
		existing = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	b64, err := s.Sign(payload)
	if err != nil {
		return nil, err
	}
	return mutate.Append(existing, mutate.Addendum{
		Layer:       static.NewLayer(payload, MediaTypeSimpleSigning),
		Annotations: map[string]string{AnnotationSignature: b64},
	})
}

// signed says whether img holds a layer with payload signed by s.
func (s *Signer) signed(img v1.Image, payload []byte) (bool, error) {
	m, err := img.Manifest()
	if err != nil {
		return false, err
	}
	want, _, err := v1.SHA256(bytes.NewReader(payload))
	if err != nil {
		return false, err
	}
	for _, l := range m.Layers {
		if l.Digest == want && s.verify(payload, l.Annotations[AnnotationSignature]) {
			return true, nil
		}
	}
	return false, nil
}

// VerifySignatures is what `cosign verify --key` checks, for tests and for toa-push's own
// check after writing: some layer of sigs is a payload for digest signed by pub.
func VerifySignatures(sigs v1.Image, pub *ecdsa.PublicKey, digest string) error {
	m, err := sigs.Manifest()
	if err != nil {
		return err
	}
	layers, err := sigs.Layers()
	if err != nil {
		return err
	}
	for i, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		payload, err := io.ReadAll(io.LimitReader(rc, maxKey))
		rc.Close()
		if err != nil {
			return err
		}
		var p simpleSigning
		if json.Unmarshal(payload, &p) != nil || p.Critical.Image.DockerManifestDigest != digest {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(m.Layers[i].Annotations[AnnotationSignature])
		if err != nil {
			continue
		}
		sum := sha256.Sum256(payload)
		if ecdsa.VerifyASN1(pub, sum[:], sig) {
			return nil
		}
	}
	return fmt.Errorf("no signature of %s by the key", digest)
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
	f, err := fsys.Open(spec, maxKey) // a FIFO there would block the open, a device the read
	if fault.IsInput(err) {
		return nil, err
	}
	if err != nil {
		return nil, &fault.Input{File: spec, Key: "--sign-key", Message: "cannot be read: " + err.Error(),
			Hint: "give --sign-key the file of an ECDSA P-256 private key in PEM"}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKey+1))
	if err != nil {
		return nil, fmt.Errorf("read the signing key %s: %w", spec, err)
	}
	return ParseKey(data, spec, password)
}

// PublicKey is the signer's public key.
func (s *Signer) PublicKey() *ecdsa.PublicKey { return &s.key.PublicKey }
