"""Tables the CLI prints (shared by `shoal members` and `shoal demo`)."""

from __future__ import annotations

# Not `typing` itself: `shoal members` would load it for annotations alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def format_members(members: list[dict[str, Any]]) -> str:
    """Members as the table `shoal members` prints (like `serf members`)."""
    rows = [
        (
            m["name"],
            m["address"],
            m["status"],
            str(m["incarnation"]),
            ",".join(f"{k}={v}" for k, v in sorted(m["tags"].items())),
        )  # fmt: skip
        for m in sorted(members, key=lambda m: m["name"])
    ]
    header = ("Name", "Address", "Status", "Inc", "Tags")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]
    )
