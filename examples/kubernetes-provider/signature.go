package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks verification (docs/webhooks.md, "Signatures"): Aperio
// signs each delivery with HMAC-SHA256 over "id.timestamp.body" and sends
// the id, the Unix timestamp and "v1,<base64 signature>" in three headers.
// There is no library for it here, so the few lines are below.

// Standard Webhooks headers.
const (
	headerWebhookID        = "webhook-id"
	headerWebhookTimestamp = "webhook-timestamp"
	headerWebhookSignature = "webhook-signature"
)

const (
	// webhookSecretPrefix starts a Standard Webhooks secret: the rest is
	// the base64 of the HMAC key.
	webhookSecretPrefix = "whsec_"
	// webhookTolerance is how far a delivery's timestamp may be from the
	// provider's clock, either way.
	webhookTolerance = 5 * time.Minute
	// maxWebhookIDBytes bounds webhook-id.
	maxWebhookIDBytes = 256
	// maxSignatureHeaderBytes and maxSignatures bound webhook-signature:
	// several signatures are sent while a secret is rotated.
	maxSignatureHeaderBytes = 4 << 10
	maxSignatures           = 16
	// maxWebhookSecretBytes bounds the secret, as Aperio bounds a
	// subscription's.
	maxWebhookSecretBytes = 1024
)

// strictStd is padded standard base64 that refuses non-canonical
// trailing bits; the input is also checked for \r and \n, which the
// decoder would otherwise skip.
var strictStd = base64.StdEncoding.Strict()

// errUnsigned is a delivery that fails verification; the details go to
// the log, the caller only learns 401.
var errUnsigned = errors.New("webhook signature not verified")

// webhookKey returns the HMAC key of secret: the base64-decoded part of a
// "whsec_" secret, the bytes of any other. A "whsec_" secret that is not
// strict base64 is an error, so a mistyped secret fails at startup rather
// than every delivery.
func webhookKey(secret string) ([]byte, error) {
	if secret == "" || len(secret) > maxWebhookSecretBytes {
		return nil, fmt.Errorf("webhook secret must have 1 to %d bytes", maxWebhookSecretBytes)
	}
	rest, ok := strings.CutPrefix(secret, webhookSecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := decodeStrictStd(rest)
	if err != nil || len(key) == 0 {
		return nil, errors.New("webhook secret starts with whsec_ but the rest is not standard base64 of a key")
	}
	return key, nil
}

// decodeStrictStd decodes padded standard base64, refusing line breaks
// and non-canonical encodings.
func decodeStrictStd(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("line break in base64")
	}
	return strictStd.DecodeString(s)
}

// verifyWebhook checks a delivery's headers and body under key at now:
// the three headers are present and bounded, the timestamp lies within
// webhookTolerance of now, and one v1 signature is the HMAC of
// id.timestamp.body, compared in constant time. It returns the delivery's
// id, or an error wrapping errUnsigned that says which check failed.
func verifyWebhook(key []byte, h http.Header, body []byte, now time.Time) (string, error) {
	id, ts, sigs := h.Get(headerWebhookID), h.Get(headerWebhookTimestamp), h.Get(headerWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return "", fmt.Errorf("%w: missing %s, %s or %s", errUnsigned, headerWebhookID, headerWebhookTimestamp, headerWebhookSignature)
	}
	if len(id) > maxWebhookIDBytes || !printable(id) {
		return "", fmt.Errorf("%w: %s is not at most %d printable bytes", errUnsigned, headerWebhookID, maxWebhookIDBytes)
	}
	if len(sigs) > maxSignatureHeaderBytes {
		return "", fmt.Errorf("%w: %s above %d bytes", errUnsigned, headerWebhookSignature, maxSignatureHeaderBytes)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(ts) > 19 || ts[0] == '+' || ts[0] == '-' {
		return "", fmt.Errorf("%w: %s %.32q is not Unix seconds", errUnsigned, headerWebhookTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > webhookTolerance || d < -webhookTolerance {
		return "", fmt.Errorf("%w: %s %d is %s from the provider's clock", errUnsigned, headerWebhookTimestamp, sec, d.Round(time.Second))
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	want := m.Sum(nil)
	for i, s := range strings.Fields(sigs) {
		if i >= maxSignatures {
			break
		}
		version, enc, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := decodeStrictStd(enc)
		if err == nil && hmac.Equal(got, want) {
			return id, nil
		}
	}
	return "", fmt.Errorf("%w: no v1 signature matches", errUnsigned)
}
