#!/bin/sh
# Creates (or replaces) the Secret mediamesh-internal-tls that every mesh pod mounts at
# /run/secrets/mediamesh-tls: a new CA (ca.crt) and one certificate for the name
# "mediamesh-internal" (tls.crt, tls.key) that servers present and clients present back
# (mutual TLS). The CA's key never leaves the temporary directory; nothing is written to the
# repository.
#
#   deploy/k8s/internal-tls-secret.sh [NAMESPACE]      # default: mediamesh
#
# For development clusters (the cpu-dev overlay). In production issue the same three keys
# with your PKI, e.g. a cert-manager Certificate (secretName: mediamesh-internal-tls,
# dnsNames: [mediamesh-internal], usages: [server auth, client auth]); cert-manager writes
# exactly ca.crt, tls.crt and tls.key.
set -eu

namespace="${1:-mediamesh}"
name="mediamesh-internal"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
# shellcheck disable=SC2086
openssl req -x509 $ec -keyout ca.key -out ca.crt -days 365 -subj "/CN=mediamesh internal CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
# shellcheck disable=SC2086
openssl req $ec -keyout tls.key -out tls.csr -subj "/CN=$name" 2>/dev/null
printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' \
    "$name" > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt \
    -days 365 -extfile tls.ext 2>/dev/null

kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$namespace" create secret generic mediamesh-internal-tls \
    --from-file=ca.crt --from-file=tls.crt --from-file=tls.key \
    --dry-run=client -o yaml | kubectl apply -f -
echo "Secret $namespace/mediamesh-internal-tls ready (CA and certificate valid 365 days)"
