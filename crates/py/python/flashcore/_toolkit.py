"""Where NVRTC and the CUDA headers are: the pip wheels this package depends on.

flashcore compiles its kernels at run time with NVRTC. The core looks in ``$CUDA_HOME``,
``/usr/local/cuda`` and ``$FLASHCORE_CUDA_WHEELS/nvidia/cu13``; this module points the last one at
the site-packages directory that holds the ``nvidia-cuda-nvrtc`` and header wheels, unless the
caller set it. Nothing is loaded here: the core opens NVRTC on the first compile.
"""

import os
import sys
from pathlib import Path

_NVRTC = Path("nvidia/cu13/lib/libnvrtc.so.13")
_HEADER = Path("nvidia/cu13/include/cuda_fp16.h")


def wheel_site():
    """The first ``sys.path`` entry holding NVRTC and the headers of the CUDA 13 wheels."""
    for entry in sys.path:
        root = Path(entry or ".")
        if (root / _NVRTC).is_file() and (root / _HEADER).is_file():
            return root
    return None


def configure():
    """Sets ``FLASHCORE_CUDA_WHEELS`` to :func:`wheel_site` when unset; returns its value."""
    if "FLASHCORE_CUDA_WHEELS" not in os.environ:
        site = wheel_site()
        if site is not None:
            os.environ["FLASHCORE_CUDA_WHEELS"] = str(site)
    return os.environ.get("FLASHCORE_CUDA_WHEELS")
