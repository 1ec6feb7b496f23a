"""Loopback only, with no name lookups: jupyter_client (and ipykernel, in
the kernel) look up the machine's addresses once, by resolving its host name
when nothing quicker is installed. In an ns warm jail that name is not yet
the sandbox's and the lookup waits for the DNS timeout (5 s); the kernels
only ever use 127.0.0.1 anyway. Imported by airlock-code.py and kernel.py."""


def apply():
    try:
        from jupyter_client import localinterfaces as li
    except ImportError:
        return
    li.LOCALHOST = "127.0.0.1"
    li.LOCAL_IPS[:] = ["127.0.0.1"]
    li.PUBLIC_IPS[:] = []
    # _load_ips runs once (its _only_once wrapper): mark it as run
    for cell in getattr(li._load_ips, "__closure__", None) or ():
        fn = cell.cell_contents
        if callable(fn) and hasattr(fn, "called"):
            fn.called = True
