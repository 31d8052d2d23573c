"""Device budgets (`cuda:6GiB`), ONNX Runtime's `session.resource_cuda_partitioning_settings`, and
the per-node memory statistics CSV a run writes and a later session reads."""

from __future__ import annotations

import os
import pathlib
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ._devices import CUDA_EP, match_device
from ._errors import BudgetError, StatsFileError
from ._units import MAX_BYTES, MAX_NUMBER_CHARS, parse_bytes, shown

RESOURCE_CUDA_PARTITIONING_KEY = "session.resource_cuda_partitioning_settings"
STATS_HEADER = "#name,input_sizes,initializers_sizes,total_dynamic_sizes,total_temp_allocations"


@attrs.frozen
class Share:
    """A budget given as a share of the device's memory (`cuda:90%`): of what is free on a present
    device, of the profile's total when planning for one (the provider's `memory_bytes`)."""

    fraction: float

    def __str__(self) -> str:
        return f"{self.fraction * 100:g}%"


@attrs.frozen
class Budgets:
    """Byte limits (or shares of device memory) per device designator, in the order given (`cuda`,
    `gpu:1`, an EP name...)."""

    limits: tuple[tuple[str, int | Share], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.limits)

    def resolve(self, eps: Sequence[Any]) -> dict[str, int]:
        """Provider name -> limit in bytes; the first designator naming a provider wins. Unmatched
        designators raise: a budget that silently applies to nothing is a configuration error."""
        out: dict[str, int] = {}
        for designator, limit in self.limits:
            ep = match_device(designator, eps)
            if ep is None:
                names = [getattr(e, "name", e) for e in eps]
                raise BudgetError(
                    f"budget device {designator!r} matches no available execution provider {names}; "
                    "use 'cuda', 'gpu', 'gpu:<index>', 'cpu' or a provider name"
                )
            if isinstance(limit, Share):
                provider = next((e for e in eps if getattr(e, "name", e) == ep), None)
                memory = getattr(provider, "memory_bytes", None)
                if not isinstance(memory, int) or memory <= 0:
                    raise BudgetError(
                        f"budget {designator}:{limit} is a share of the device's memory, but {ep} reports none "
                        "(no device, and no device profile); give bytes instead, e.g. 'cuda:6GiB'")
                limit = int(memory * limit.fraction)
            out.setdefault(ep, limit)
        return out


def parse_budget(text: str | Budgets | Mapping[str, int | str] | None) -> Budgets:
    """Parse `cuda:6GiB`, `cuda=6442450944`, `cuda:0:512MB`, `gpu:1=2GiB, cpu:32GiB`, `cuda:90%` (a share of
    the device's memory, resolved against the provider's `memory_bytes`; entries split on `,` or `;`). A
    mapping `{"cuda": "6GiB"}` or an existing `Budgets` is accepted too."""
    if text is None:
        return Budgets()
    if isinstance(text, Budgets):
        return text
    if isinstance(text, Mapping):
        bad_key = next((k for k in text if not isinstance(k, str)), None)
        if bad_key is not None:
            raise BudgetError(f"budget device {shown(bad_key)} must be a str such as 'cuda', 'gpu:1' or 'cpu'")
        items = [(k.strip(), v) for k, v in text.items()]
        return _checked(items, shown(dict(text)))
    if not isinstance(text, str):
        raise BudgetError(f"budget {shown(text)} ({type(text).__name__}) must be a string like 'cuda:6GiB' or a mapping")
    if not text.strip():
        raise BudgetError("budget string is empty; give one like 'cuda:6GiB' or 'cuda=6442450944'")
    items: list[tuple[str, Any]] = []
    for entry in re.split(r"[;,]", text):
        entry = entry.strip()
        if not entry:
            continue
        if "=" in entry:
            device, _, amount = entry.rpartition("=")
        elif ":" in entry:
            device, _, amount = entry.rpartition(":")
        else:
            raise BudgetError(
                f"budget entry {shown(entry)} in {shown(text)} names no device; write 'device:size', e.g. 'cuda:6GiB'"
            )
        device, amount = device.strip(), amount.strip()
        if not device:
            raise BudgetError(f"budget entry {shown(entry)} in {shown(text)} has an empty device; e.g. 'cuda:6GiB'")
        if not amount:
            raise BudgetError(f"budget for {shown(device)} in {shown(text)} is empty; give a size like '6GiB'")
        items.append((device, amount))
    return _checked(items, shown(text))


def _checked(items: Iterable[tuple[str, Any]], text: str) -> Budgets:
    """`text`: the budget as shown in messages (already cut to length)."""
    limits: list[tuple[str, int]] = []
    seen: set[str] = set()
    for device, amount in items:
        key = device.lower()
        if key in seen:
            raise BudgetError(f"device {shown(device)} has two budgets in {text}; give each device one budget")
        seen.add(key)
        try:
            limits.append((device, _share(amount) if isinstance(amount, str) and amount.strip().endswith("%")
                           else parse_bytes(amount)))
        except BudgetError as e:
            raise BudgetError(f"budget for {shown(device)} in {text}: {e}") from e
    if not limits:
        raise BudgetError(f"budget {text} has no entries; give one like 'cuda:6GiB'")
    return Budgets(tuple(limits))


def _share(text: str) -> Share:
    number = text.strip()[:-1].strip()
    try:
        if len(number) > MAX_NUMBER_CHARS or not number.isascii():
            raise ValueError(number)
        pct = float(number)
    except ValueError:
        raise BudgetError(f"{shown(text)} is not a percentage; write e.g. '90%' "
                          f"(a number of at most {MAX_NUMBER_CHARS} characters)") from None
    if not 0 < pct <= 100:  # also refuses nan and inf
        raise BudgetError(f"{shown(text)} is outside (0%, 100%]; give a share of the device's memory such as '90%'")
    return Share(pct / 100)


# -- measured per-node memory statistics ------------------------------------------------------
@attrs.frozen
class NodeAllocationStats:
    """One CSV row: what a node allocated in a measured run (bytes)."""

    input_sizes: int = 0
    initializers_sizes: int = 0
    total_dynamic_sizes: int = 0
    total_temp_allocations: int = 0

    @property
    def total(self) -> int:
        return self.input_sizes + self.initializers_sizes + self.total_dynamic_sizes + self.total_temp_allocations

    def max(self, other: NodeAllocationStats) -> NodeAllocationStats:
        """Field-wise maximum (ONNX Runtime's UpdateIfGreater across runs)."""
        return NodeAllocationStats(*(max(a, b) for a, b in zip(attrs.astuple(self), attrs.astuple(other), strict=True)))


_HASHED = re.compile(r"^(.*)_(\d{6,})$")


class NodeStats(dict):
    """Node name -> `NodeAllocationStats`. `lookup` also finds rows ONNX Runtime keyed as
    `<name>_<hash of inputs/outputs>`."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._stripped: dict[str, NodeAllocationStats] | None = None

    def lookup(self, node_name: str) -> NodeAllocationStats | None:
        hit = self.get(node_name)
        if hit is not None:
            return hit
        if self._stripped is None:
            self._stripped = {}
            for key, val in self.items():
                m = _HASHED.match(key)
                if m is not None:
                    self._stripped.setdefault(m.group(1), val)
        return self._stripped.get(node_name)


MAX_STATS_FILE_BYTES = 64 * 2**20  # ONNX Runtime's CSV is ~100 bytes a node: 64 MiB is ~600k nodes


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _read_stats_text(p: pathlib.Path) -> str:
    """The file's text, read only if it is a regular file of at most MAX_STATS_FILE_BYTES: a FIFO would
    block initialization forever, /dev/zero would read until memory runs out. Opened non-blocking and
    checked with fstat on the open descriptor (a path swapped between a stat and the open is caught)."""
    shown_path = str(p)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise StatsFileError(f"cannot read node memory statistics file {shown_path!r}: {why}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StatsFileError(
                f"node memory statistics file {shown_path!r} is {_file_kind(st.st_mode)}, not a regular file; give "
                "the path of the CSV a previous run wrote (memory_profile_out)")
        if st.st_size > MAX_STATS_FILE_BYTES:
            raise StatsFileError(
                f"node memory statistics file {shown_path!r} is {st.st_size} bytes, more than the "
                f"{MAX_STATS_FILE_BYTES // 2**20} MiB limit; a statistics CSV is about 100 bytes per node — "
                "check the path names the CSV a previous run wrote")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:  # owns and closes fd
        data = f.read(MAX_STATS_FILE_BYTES + 1)  # a file growing after fstat is still bounded
    if len(data) > MAX_STATS_FILE_BYTES:
        raise StatsFileError(f"node memory statistics file {shown_path!r} grew past the "
                             f"{MAX_STATS_FILE_BYTES // 2**20} MiB limit while it was read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StatsFileError(f"node memory statistics file {shown_path!r} is not UTF-8 text (byte {e.start}); "
                             "give the CSV a previous run wrote") from e


def read_node_stats(path: str | os.PathLike[str]) -> NodeStats:
    """Read the CSV (`#` lines are comments; rows `name,input,initializers,dynamic,temp`). Only a regular
    file of at most 64 MiB is read; sizes are 0 .. 2**63-1 bytes."""
    p = pathlib.Path(path)
    text = _read_stats_text(p)
    stats = NodeStats()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.rsplit(",", 4)]
        if len(fields) != 5 or not fields[0]:
            raise StatsFileError(
                f"{p}:{lineno}: row {shown(line)} must have 5 fields: {STATS_HEADER.lstrip('#')}"
            )
        if any(not (f.isascii() and f.isdigit()) or len(f) > MAX_NUMBER_CHARS for f in fields[1:]):
            if any(f.startswith("-") and f[1:].isdigit() for f in fields[1:]):
                raise StatsFileError(f"{p}:{lineno}: row {shown(line)} has a negative size")
            raise StatsFileError(f"{p}:{lineno}: row {shown(line)} has a non-integer size; sizes are bytes "
                                 f"(digits 0-9, at most {MAX_NUMBER_CHARS})")
        nums = [int(f) for f in fields[1:]]
        if any(n > MAX_BYTES for n in nums):
            raise StatsFileError(f"{p}:{lineno}: row {shown(line)} has a size over 2**63-1 bytes")
        stats[fields[0]] = NodeAllocationStats(*nums)
    return stats


def format_node_stats(stats: Mapping[str, NodeAllocationStats]) -> str:
    lines = [STATS_HEADER]
    for name, s in stats.items():
        lines.append(f"{name},{s.input_sizes},{s.initializers_sizes},{s.total_dynamic_sizes},{s.total_temp_allocations}")
    return "\n".join(lines) + "\n"


def write_node_stats(path: str | os.PathLike[str], stats: Mapping[str, NodeAllocationStats]) -> pathlib.Path:
    """Write the CSV in ONNX Runtime's format; returns the path written. A regular file is replaced whole
    (written beside it, then renamed); an existing device or FIFO is written in place (OSError when it
    cannot take the bytes, e.g. /dev/full, or a FIFO no one reads)."""
    p = pathlib.Path(path)
    data = format_node_stats(stats).encode("utf-8")
    try:
        special = not stat.S_ISREG(os.stat(p).st_mode)
    except FileNotFoundError:
        special = False
    if special:  # a device or FIFO is written in place, never replaced by a file; non-blocking: a FIFO never hangs
        fd = os.open(p, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return p
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")  # written whole, then renamed: no half-written CSV
    try:
        tmp.write_bytes(data)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


class NodeStatsRecorder:
    """Collects per-node statistics over one or more runs (field-wise maximum) and writes the CSV."""

    def __init__(self) -> None:
        self.stats: NodeStats = NodeStats()

    def report(self, node_name: str, stats: NodeAllocationStats) -> None:
        old = self.stats.get(node_name)
        self.stats[node_name] = stats if old is None else old.max(stats)

    def dump(self, path: str | os.PathLike[str]) -> pathlib.Path:
        return write_node_stats(path, self.stats)


@attrs.frozen
class ResourcePartitioningSettings:
    """Parsed `session.resource_cuda_partitioning_settings`: limit (bytes, None = no limit) + stats."""

    limit_bytes: int | None
    stats_path: pathlib.Path
    stats: NodeStats = attrs.field(eq=False, repr=False)
    ep_name: str = CUDA_EP

    def budgets(self) -> Budgets:
        return Budgets(((self.ep_name, self.limit_bytes),)) if self.limit_bytes is not None else Budgets()


def parse_resource_partitioning_settings(value: str, model_dir: str | os.PathLike[str] | None = None,
                                         ep_name: str = CUDA_EP) -> ResourcePartitioningSettings:
    """Parse `"<limit_kb>,<stats_file>"` as ONNX Runtime does: the limit is in KiB (may be empty: no
    limit), the stats file is required and relative to the model's directory."""
    if not isinstance(value, str):
        raise BudgetError(f"{RESOURCE_CUDA_PARTITIONING_KEY}={shown(value)} must be a str '<limit_kb>,<stats_file>', "
                          "e.g. '4194304,node_stats.csv'")
    parts = value.split(",")
    if len(parts) != 2:
        raise BudgetError(
            f"{RESOURCE_CUDA_PARTITIONING_KEY}={shown(value)}: expected '<limit_kb>,<stats_file>' "
            "(two comma separated fields), e.g. '4194304,node_stats.csv'"
        )
    limit_txt, file_txt = parts[0].strip(), parts[1].strip()
    if not file_txt:
        raise BudgetError(
            f"{RESOURCE_CUDA_PARTITIONING_KEY}={shown(value)}: the stats file is missing; give the CSV a previous "
            "run wrote, or use a budget string such as 'cuda:4GiB' for a limit alone"
        )
    limit: int | None = None
    if limit_txt:
        if not (limit_txt.isascii() and limit_txt.isdigit()) or len(limit_txt) > MAX_NUMBER_CHARS:
            raise BudgetError(
                f"{RESOURCE_CUDA_PARTITIONING_KEY}={shown(value)}: limit {shown(limit_txt)} must be a whole number "
                f"of KiB (digits 0-9, at most {MAX_NUMBER_CHARS})"
            )
        limit = int(limit_txt) * 1024
        if limit > MAX_BYTES:
            raise BudgetError(
                f"{RESOURCE_CUDA_PARTITIONING_KEY}={shown(value)}: limit {limit_txt} KiB exceeds the largest size, "
                f"2**63-1 bytes; give at most {MAX_BYTES // 1024} KiB"
            )
    path = pathlib.Path(file_txt)
    if not path.is_absolute() and model_dir is not None:
        path = pathlib.Path(model_dir) / path
    return ResourcePartitioningSettings(limit_bytes=limit, stats_path=path, stats=read_node_stats(path),
                                        ep_name=ep_name)
