"""The Debian package as the install tests use it: built with cpack (as `make
deb` does) and its Depends read back, for a root made with mmdebstrap."""
import os
import subprocess

from harness import BIN

BUILD = os.path.realpath(os.path.join(BIN, ".."))


def run(*cmd, check=True, timeout=600, **kw):
    """cmd's CompletedProcess (text); with check, an AssertionError carrying
    its output when it exits non-zero."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def make_deb(out):
    """Build the package into directory out; the one .deb's path."""
    run("cpack", "-B", out, "--config", os.path.join(BUILD, "CPackConfig.cmake"), cwd=BUILD)
    debs = [f for f in os.listdir(out) if f.endswith(".deb")]
    if len(debs) != 1:
        raise AssertionError(f"cpack made {debs}, not one .deb")
    return os.path.join(out, debs[0])


def deb_depends(deb):
    """The package names of the .deb's Depends (versions dropped)."""
    depends = run("dpkg-deb", "-f", deb, "Depends").stdout
    return [d.split("(")[0].strip() for d in depends.split(",") if d.strip()]
