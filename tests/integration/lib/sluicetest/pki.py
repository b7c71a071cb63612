"""Test certificates made with the openssl CLI (EC P-256, short-lived)."""

import base64
import hashlib
import os
import subprocess

from .base import run


class CA:
    def __init__(self, tmpdir, name):
        self.dir = tmpdir
        self.name = name
        self.key = os.path.join(tmpdir, name + "-ca.key")
        self.cert = os.path.join(tmpdir, name + "-ca.pem")
        run(["openssl", "req", "-x509", "-newkey", "ec",
             "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", self.key, "-out", self.cert, "-days", "2",
             "-subj", "/CN=sluice test CA %s" % name,
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        os.chmod(self.key, 0o600)

    def issue(self, name, sans):
        """A server certificate for sans (e.g. ["DNS:a.test",
        "IP:198.18.1.2"]); returns (cert_path, key_path)."""
        key = os.path.join(self.dir, name + ".key")
        csr = os.path.join(self.dir, name + ".csr")
        cert = os.path.join(self.dir, name + ".pem")
        ext = os.path.join(self.dir, name + ".ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=critical,CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=serverAuth\n"
                    "subjectKeyIdentifier=hash\n"
                    "authorityKeyIdentifier=keyid\n"
                    "subjectAltName=%s\n" % ",".join(sans))
        run(["openssl", "req", "-new", "-newkey", "ec",
             "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", "/CN=%s" % name])
        run(["openssl", "x509", "-req", "-in", csr, "-CA", self.cert,
             "-CAkey", self.key, "-CAcreateserial", "-out", cert,
             "-days", "2", "-extfile", ext])
        os.chmod(key, 0o600)
        return cert, key


def spki_pin(cert):
    """base64(SHA-256(SubjectPublicKeyInfo DER)) of a certificate, the
    form of upstream.pin_sha256 (and of curl's --pinnedpubkey), computed
    with the openssl CLI: x509 -pubkey | pkey -outform DER | dgst."""
    pem = run(["openssl", "x509", "-in", cert, "-pubkey", "-noout"]).stdout
    der = _run_bin(["openssl", "pkey", "-pubin", "-outform", "DER"],
                   pem.encode())
    digest = _run_bin(["openssl", "dgst", "-sha256", "-binary"], der)
    if len(digest) != 32 or hashlib.sha256(der).digest() != digest:
        raise RuntimeError("openssl dgst gave an unexpected digest")
    return base64.b64encode(digest).decode()


def _run_bin(argv, data):
    p = subprocess.run(argv, input=data, capture_output=True, timeout=10)
    if p.returncode != 0 or not p.stdout:
        raise RuntimeError("%s: %s" % (" ".join(argv),
                                       p.stderr.decode("utf-8", "replace")))
    return p.stdout
