"""Image archives built by hand for the OCI import tests (test_oci.py):
layers as Python tarfile archives, wrapped as a `docker save` tar or an OCI
image layout (a directory, or a tar of one). Nothing here talks to a
registry."""
import gzip
import hashlib
import io
import json
import os
import tarfile


def entry(name, data=None, *, type=tarfile.REGTYPE, mode=0o644, uid=0, gid=0, linkname="",
          devmajor=0, devminor=0):
    """One layer entry: (TarInfo, bytes or None)."""
    ti = tarfile.TarInfo(name)
    ti.type = type
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.linkname = linkname
    ti.devmajor, ti.devminor = devmajor, devminor
    ti.mtime = 1700000000
    if data is not None:
        data = data.encode() if isinstance(data, str) else data
        ti.size = len(data)
    return ti, data


def d(name, mode=0o755, uid=0, gid=0):
    return entry(name, type=tarfile.DIRTYPE, mode=mode, uid=uid, gid=gid)


def sym(name, target):
    return entry(name, type=tarfile.SYMTYPE, linkname=target, mode=0o777)


def layer_tar(entries, fmt=tarfile.PAX_FORMAT):
    """The bytes of a layer tar of entries (TarInfo, data) in that order."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as t:
        for ti, data in entries:
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    return bio.getvalue()


def config_blob(env=None, workdir=None, user=None, cmd=None, entrypoint=None):
    cfg = {}
    if env is not None:
        cfg["Env"] = env
    if workdir is not None:
        cfg["WorkingDir"] = workdir
    if user is not None:
        cfg["User"] = user
    if cmd is not None:
        cfg["Cmd"] = cmd
    if entrypoint is not None:
        cfg["Entrypoint"] = entrypoint
    return json.dumps({"architecture": "amd64", "os": "linux", "config": cfg,
                       "rootfs": {"type": "layers", "diff_ids": []}}).encode()


def _add(t, name, data, mode=0o644):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = mode
    ti.mtime = 1700000000
    t.addfile(ti, io.BytesIO(data))


def docker_save(path, layers, config, extra_layer_names=(), truncate_outer=0, links=None):
    """A `docker save` archive: <id>/layer.tar per layer, <hash>.json config,
    manifest.json. extra_layer_names are named in the manifest but absent.
    links: {layer index: symlink target} writes that layer as a symlink
    member instead (as docker does for a layer it already wrote)."""
    cfg_name = hashlib.sha256(config).hexdigest() + ".json"
    names = []
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for i, data in enumerate(layers):
            name = f"{hashlib.sha256(data).hexdigest()[:12]}{i}/layer.tar"
            if links and i in links:
                ti = tarfile.TarInfo(name)
                ti.type = tarfile.SYMTYPE
                ti.linkname = links[i]
                t.addfile(ti)
            else:
                _add(t, name, data)
            names.append(name)
        _add(t, cfg_name, config)
        manifest = [{"Config": cfg_name, "RepoTags": ["test:latest"],
                     "Layers": names + list(extra_layer_names)}]
        _add(t, "manifest.json", json.dumps(manifest).encode())
    data = bio.getvalue()
    if truncate_outer:
        data = data[:truncate_outer]
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o644)


def _blob(blobs, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def oci_layout(layers, config, gzip_layers=True):
    """{relative path: bytes} of an OCI image layout (index -> manifest)."""
    blobs = {}
    descs = []
    for data in layers:
        if gzip_layers:
            data = gzip.compress(data, mtime=0)
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar" +
                      ("+gzip" if gzip_layers else ""),
                      "digest": _blob(blobs, data), "size": len(data)})
    cfg = {"mediaType": "application/vnd.oci.image.config.v1+json",
           "digest": _blob(blobs, config), "size": len(config)}
    manifest = json.dumps({"schemaVersion": 2,
                           "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": cfg, "layers": descs}).encode()
    mdesc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": _blob(blobs, manifest), "size": len(manifest),
             "platform": {"os": "linux", "architecture": "amd64"}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [mdesc]}
    files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
             "index.json": json.dumps(index).encode()}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":")[1]] = data
    return files


def write_layout_dir(root, files):
    for rel, data in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, 0o644)
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)


def write_layout_tar(path, files):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for rel, data in files.items():
            _add(t, rel, data)
    os.chmod(path, 0o644)
