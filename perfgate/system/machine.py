"""Identity of this machine: GPU model and count, driver, CUDA, torch, nsys.

``machine_class`` keys baselines (``baselines/<workload>/<machine_class>.json``): GPU model slug
and count (``nvidia-h100-80gb-hbm3-x1``), or ``cpu-<arch>`` without a GPU. The GPUs are those
``CUDA_VISIBLE_DEVICES`` leaves to this process (``visible_gpus``), not every GPU of the host:
nvidia-smi and NVML ignore that variable. Nothing here imports torch: its version and CUDA version
are read from its installed files.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from perfgate.records.model import MachineInfo


def machine_class_for(gpu_model: str | None, gpu_count: int, arch: str | None = None) -> str:
    """``nvidia-h100-80gb-hbm3-x1`` for one "NVIDIA H100 80GB HBM3", ``cpu-x86_64`` without GPU."""
    if not gpu_model or gpu_count < 1:
        return f"cpu-{slug(arch or platform.machine() or 'unknown')}"
    model = slug(gpu_model)
    if not model.startswith("nvidia"):
        model = f"nvidia-{model}"
    return f"{model}-x{gpu_count}"


def slug(text: str) -> str:
    """Lower-case, runs of anything but letters/digits/'_' become '-'."""
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def visible_gpus(cuda_visible_devices: str | None, gpus: Sequence[tuple[int, str]]) -> list[int] | None:
    """The host's GPUs a CUDA process sees, as their nvidia-smi (= NVML) indices in CUDA's order
    (CUDA's device i is the i-th), from ``CUDA_VISIBLE_DEVICES`` (None: unset) and the host's GPUs
    as (index, UUID) pairs. CUDA's rules: unset, every GPU; empty, none; else comma-separated
    entries, each an index or a GPU's UUID (``GPU-...``, a unique prefix is enough), read up to the
    first entry that names no GPU or one already named (CUDA ignores it and every entry after it).
    A MIG instance named by its GPU (``MIG-GPU-<uuid>/<gi>/<ci>``, drivers before R470) makes its GPU
    visible; None where one is named by its own UUID (``MIG-<uuid>``), which the host's GPU list
    cannot resolve.

    An index is read as nvidia-smi's (PCI bus order), which is CUDA's under
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. CUDA's default order (fastest first) is that one too on a host
    of one GPU model in practice; on a host of mixed models it may number the GPUs otherwise."""
    if cuda_visible_devices is None:
        return [index for index, _ in gpus]
    seen: list[int] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.startswith("MIG-"):
            if not entry.startswith("MIG-GPU-"):
                return None
            entry = entry.removeprefix("MIG-").partition("/")[0]
        if entry.startswith("GPU-"):
            named = [index for index, uuid in gpus if uuid.startswith(entry)]
        elif re.fullmatch(r"\d+", entry):
            named = [index for index, _ in gpus if index == int(entry)]
        else:
            named = []
        if len(named) != 1 or named[0] in seen:
            break
        seen.append(named[0])
    return seen


def query_gpus() -> tuple[list[str], str | None, str | None]:
    """(names of the GPUs this process sees, in CUDA's order, driver version, driver CUDA version)
    from nvidia-smi; empty without one. Where ``CUDA_VISIBLE_DEVICES`` names MIG instances that
    ``visible_gpus`` cannot resolve, one name per entry: the host's first GPU's model."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], None, None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return [], None, None
    if out.returncode != 0:
        return [], None, None
    names: dict[int, str] = {}
    uuids: list[tuple[int, str]] = []
    driver = None
    for line in out.stdout.splitlines():
        index, _, rest = line.partition(",")
        uuid, _, rest = rest.partition(",")
        name, _, drv = rest.rpartition(",")
        if index.strip().isdigit() and name:
            names[int(index)] = name.strip()
            uuids.append((int(index), uuid.strip()))
            driver = drv.strip() or driver
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = visible_gpus(cuda_visible, uuids)
    if visible is None:   # MIG instances by their own UUIDs: one device each, of the host's model
        entries = [e for e in (cuda_visible or "").split(",") if e.strip()]
        visible_names = [next(iter(names.values()))] * len(entries) if names else []
    else:
        visible_names = [names[i] for i in visible]
    cuda = None
    try:
        banner = subprocess.run([smi], capture_output=True, text=True, timeout=30, check=False).stdout
        found = re.search(r"CUDA Version:\s*([\d.]+)", banner)
        cuda = found.group(1) if found else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return visible_names, driver, cuda


def torch_versions() -> tuple[str | None, str | None]:
    """(torch version, the CUDA version torch was built with), without importing torch."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    cuda = None
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        version_py = Path(spec.origin).with_name("version.py")
        try:
            found = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version_py.read_text(), re.M)
            cuda = found.group(1) if found else None
        except OSError:
            pass
    return version, cuda


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


@functools.lru_cache(maxsize=8)
def machine_info(nsys: Path | None = None, machine_class: str | None = None) -> MachineInfo:
    """This machine's identity (cached per process). ``machine_class`` overrides the detected one
    (settings ``machine_class`` / ``PERFGATE_MACHINE_CLASS``, for CI runners of one pool)."""
    names, driver, driver_cuda = query_gpus()
    torch_version, torch_cuda = torch_versions()
    nsys_version = None
    if nsys is not None:
        from perfgate.system.nsys import nsys_version as read_nsys_version

        try:
            nsys_version = read_nsys_version(nsys)
        except Exception:  # an unreadable version must not hide the machine identity
            nsys_version = None
    gpu_model = names[0] if names else None
    return MachineInfo(
        machine_class=machine_class or machine_class_for(gpu_model, len(names)),
        gpu_model=gpu_model,
        gpu_count=len(names),
        driver=driver,
        cuda=torch_cuda or driver_cuda,
        torch=torch_version,
        nsys=nsys_version,
        hostname=socket.gethostname() or None,
        cpu=cpu_model(),
        python=platform.python_version(),
    )


def this_machine(nsys_setting: str | None, machine_class: str | None) -> MachineInfo:
    """MachineInfo of this machine with the version of the nsys a gate would use (settings ``nsys``;
    none where nsys cannot be found)."""
    from perfgate.errors import PerfgateError
    from perfgate.system.nsys import find_nsys

    try:
        nsys: Path | None = find_nsys(nsys_setting)
    except PerfgateError:
        nsys = None
    return machine_info(nsys, machine_class)
