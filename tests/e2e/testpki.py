"""testpki.py - a throwaway PKI for the e2e tests: a CA and certificates it
signs, made by `openssl` in a directory of the test's (two days' validity,
P-256). test_tls (the API's TLS) and test_byok_tls (the key service's) use
it."""
import hashlib
import os
import subprocess


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)


def make_ca(d, name, cn=None):
    """(key, certificate) of a new CA named `cn` (default: `name`)."""
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".pem")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN={cn or name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, crt


def make_cert(d, name, ca_key, ca_crt, san, cn=None):
    """(key, certificate) for a server: subjectAltName `san` (e.g.
    "DNS:localhost" or "IP:127.0.0.1"), signed by the CA."""
    key, csr, crt = (os.path.join(d, name + s) for s in (".key", ".csr", ".pem"))
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", csr, "-subj", f"/CN={cn or name}")
    openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
            "-out", crt, "-days", "2", "-extfile", ext)
    return key, crt


def cert_sha256(crt):
    """The hex SHA-256 of a certificate's DER form (what a pin names)."""
    der = subprocess.run(["openssl", "x509", "-in", crt, "-outform", "DER"], check=True,
                         capture_output=True).stdout
    return hashlib.sha256(der).hexdigest()
