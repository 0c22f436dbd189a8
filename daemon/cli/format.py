"""Tables the CLI prints (shared by `shoal members` and `shoal demo`)."""

from __future__ import annotations

# Not `typing` itself: `shoal members` would load it for annotations alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def format_members(members: list[dict[str, Any]], detailed: bool = False) -> str:
    """Members as the table `shoal members` prints (like `serf members`);
    `detailed` adds each member's protocol ranges and feature level (as
    `serf members -detailed` shows its protocol versions), and its part in
    the election: `voter`, or `replaced` while the voter configuration still
    names the data directory it had before, blank otherwise; a member that
    came back with a new data directory says so, with the start of its old
    id (`non-voter (new data directory, was 3f9a0c12)`)."""
    rows = [
        (
            m["name"],
            m["address"],
            m["status"],
            str(m["incarnation"]),
            *(_detail(m) if detailed else ()),
            ",".join(f"{k}={v}" for k, v in sorted(m["tags"].items())),
        )  # fmt: skip
        for m in sorted(members, key=lambda m: m["name"])
    ]
    header = ("Name", "Address", "Status", "Inc", *(("Versions", "Voter") if detailed else ()),
              "Tags")  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]
    )


def _detail(m: dict[str, Any]) -> tuple[str, str]:
    """The Versions and Voter cells of `--detailed`."""
    return _versions(m.get("versions")), _voter(m.get("voter"), m.get("former_node_id"))


def _versions(v: Any) -> str:
    """`env 1-1 mem 1-2 el 1-1 sync 1-1 feat 2`: short, one column."""
    if not isinstance(v, dict):
        return "?"
    short = {"envelope": "env", "membership": "mem", "election": "el", "sync": "sync"}
    parts = [f"{short.get(k, k)} {r[0]}-{r[1]}" for k, r in v.items() if isinstance(r, list)]
    return " ".join(parts) + f" feat {v.get('features', '?')}"


def _voter(role: Any, former: Any) -> str:
    """The Voter column: `voter`, `replaced`, or blank, with a note when the
    member came back with a new data directory (`former`: its old id)."""
    if isinstance(former, str) and former:
        return f"{role or 'non-voter'} (new data directory, was {former[:8]})"
    if role == "replaced":
        return "replaced (new data directory)"
    return "voter" if role == "voter" else ""
