#!/bin/sh
# make-certs.sh — make the TLS material for blockcsi-target and its clients.
#
#   deploy/target-host/make-certs.sh OUT_DIR SAN [SAN...]
#
# SAN: each name or address the controllers use to reach the agent, as in
# --target-agent (DNS:storage1.example.internal or IP:192.0.2.10; a bare word is
# taken as DNS, a dotted quad as IP).
#
# Writes into OUT_DIR (created, mode 0700):
#   ca.crt ca.key         a private CA for this storage host and its clients only.
#                         Keep ca.key offline; it signs new client certificates.
#   server.crt server.key the agent's certificate (serverAuth) for the SANs
#   client.crt client.key the controllers' certificate (clientAuth, CN=blockcsi-controller)
# Re-running with the same OUT_DIR keeps the CA and re-issues the two leaf
# certificates (rotation); delete OUT_DIR to start over.
#
# Keys are ECDSA P-256; leaves are valid for DAYS (default 397), the CA for 10 years.
set -eu

if [ "$#" -lt 2 ]; then
    sed -n '2,20p' "$0" >&2
    exit 2
fi
out=$1
shift
days=${DAYS:-397}

command -v openssl >/dev/null 2>&1 || { echo "make-certs.sh: openssl not found" >&2; exit 1; }

san=""
for name in "$@"; do
    case $name in
        DNS:*|IP:*) entry=$name ;;
        *[!0-9.]*) entry="DNS:$name" ;;
        *) entry="IP:$name" ;;
    esac
    san="${san:+$san,}$entry"
done

umask 077
mkdir -p "$out"
cd "$out"

if [ ! -f ca.key ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key
    openssl req -x509 -new -key ca.key -sha256 -days 3650 \
        -subj "/CN=blockcsi-target CA" \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out ca.crt
fi

# issue NAME CN EXTENDED_KEY_USAGE [SAN]
issue() {
    openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$3"
        if [ -n "${4:-}" ]; then echo "subjectAltName=$4"; fi
    } > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
        -sha256 -days "$days" -extfile "$1.ext" -out "$1.crt"
    rm -f "$1.csr" "$1.ext"
}

issue server blockcsi-target serverAuth "$san"
issue client blockcsi-controller clientAuth

openssl verify -CAfile ca.crt server.crt client.crt >/dev/null

cat <<MSG
TLS material in $out (SANs: $san).

On the storage host:
  install -d -m 0700 /etc/blockcsi/tls
  install -m 0600 $out/server.crt $out/server.key $out/ca.crt /etc/blockcsi/tls/

In the cluster (the Secret the controller mounts):
  kubectl -n blockcsi create secret generic blockcsi-agent-client-tls \\
      --from-file=tls.crt=$out/client.crt --from-file=tls.key=$out/client.key \\
      --from-file=ca.crt=$out/ca.crt
MSG
