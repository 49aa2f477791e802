package operators

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// WebhookCABundle returns the PEM CA certificate that signed the local webhook server's certificate,
// for the caBundle of a webhook configuration that points at https://127.0.0.1:<port>.
func WebhookCABundle(stateDir, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(certDir(stateDir, name), "ca.crt"))
}

// WebhookCerts writes (or keeps, while valid for another day) a CA and a serving certificate for
// 127.0.0.1 for a webhook server the caller runs itself, and returns the directory holding tls.crt,
// tls.key and ca.crt.
func WebhookCerts(stateDir, name string) (string, error) { return ensureWebhookCerts(stateDir, name) }

func certDir(stateDir, name string) string { return filepath.Join(Dir(stateDir), name+"-certs") }

// ensureWebhookCerts writes a CA and a serving certificate for 127.0.0.1 and localhost (tls.crt,
// tls.key, ca.crt) unless a serving certificate valid for another day is already there.
func ensureWebhookCerts(stateDir, name string) (string, error) {
	dir := certDir(stateDir, name)
	if certValid(filepath.Join(dir, "tls.crt"), 24*time.Hour) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "statefulops local webhook CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	leafTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTemplate, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for file, data := range files {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			return "", fmt.Errorf("writing %s: %w", file, err)
		}
	}
	return dir, nil
}

// certValid reports whether the PEM certificate at path exists and is valid for at least `left` more.
func certValid(path string, left time.Duration) bool {
	raw, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	return err == nil && time.Now().Add(left).Before(cert.NotAfter)
}
