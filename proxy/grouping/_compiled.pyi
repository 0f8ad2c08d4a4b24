# The grouping's compiled parts (a Rust extension, proxy/grouping/compiled_rs): see
# neardup.proxy.grouping.fingerprints (equal_slot_pairs) and neardup.proxy.grouping.spliced_page.

from collections.abc import Callable
from typing import Literal

def equal_slot_pairs(signatures: bytes, counts: bytes, num_perm: int, need: int, /) -> tuple[bytes, bytes, bytes]: ...
def spliced_page(
    rounds: list[tuple[bytes, tuple[int, int, int, int, int, bytes], int]],
    start: int,
    size: int,
    need: int,
    total_as_int: bool,
    version: bytes,
    num_perm: int,
    max_rows: int,
    similarities: bytes,
    marks: tuple[bytes, bytes, bytes, bytes],
    summary: Callable[[int, int, int, int], bytes],
    /,
) -> tuple[bytes, int, int, int, int] | Literal[False] | None: ...
