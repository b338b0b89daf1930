"""On PYTHONPATH for the rehearsal test: in every Python process but the download commands, an
Internet connection (AF_INET/AF_INET6) is refused and written to $RESREPRO_REFUSED_LOG, as on a
cluster's compute nodes; Unix sockets (the preload server's) stay open."""

import os
import socket
import sys

DOWNLOADS = {"download", "fetch-translation", "fetch-coco", "fetch-backbone"}
_connect = socket.socket.connect


def _guarded_connect(self, address):
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if self.family in (socket.AF_INET, socket.AF_INET6) and command not in DOWNLOADS:
        with open(os.environ["RESREPRO_REFUSED_LOG"], "a") as log:
            log.write(f"{os.getpid()} {' '.join(sys.argv)} -> {address}\n")
        raise OSError(f"network refused in a compute job (tests/offline/sitecustomize.py): {address}")
    return _connect(self, address)


if os.environ.get("RESREPRO_REFUSED_LOG"):
    socket.socket.connect = _guarded_connect
