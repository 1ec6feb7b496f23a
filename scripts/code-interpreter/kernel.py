"""The Python kernel of airlock-code: ipykernel, with jupyter_client's
address lookup replaced by loopback (airlock_loopback.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import airlock_loopback  # noqa: E402

airlock_loopback.apply()
sys.path.pop(0)
from ipykernel import kernelapp  # noqa: E402

kernelapp.launch_new_instance()
