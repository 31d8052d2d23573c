"""One exception hierarchy for ort-partition, plus the warnings it emits."""

from __future__ import annotations


class PartitionError(Exception):
    """Base class of every error ort-partition raises."""


class RuleSyntaxError(PartitionError, ValueError):
    """A layer rule string does not parse. `str()` quotes the string with a caret under the column."""

    def __init__(self, message: str, text: str, column: int) -> None:
        self.message = message
        self.text = text
        self.column = max(0, min(column, len(text)))
        super().__init__(self._render())

    WINDOW = 200  # longer strings are shown as the part around the column

    def _render(self) -> str:
        shown = self.text.replace("\n", " ").replace("\t", " ")
        column = self.column
        if len(shown) > self.WINDOW:
            start = max(0, min(column - self.WINDOW // 2, len(shown) - self.WINDOW))
            head = "..." if start else ""
            tail = "..." if start + self.WINDOW < len(shown) else ""
            column = column - start + len(head)
            shown = head + shown[start:start + self.WINDOW] + tail
        return f"{self.message}\n  {shown}\n  {' ' * column}^"


class RuleError(PartitionError, ValueError):
    """Rules parse but cannot be used as configured (both options set, '=' in name mode, ...)."""


class BudgetError(PartitionError, ValueError):
    """A budget, byte size or resource-partitioning setting is malformed."""


class StatsFileError(PartitionError, ValueError):
    """The per-node memory statistics CSV cannot be read or is malformed."""


class UnknownProfileError(PartitionError, KeyError):
    """A device profile name that is not in the built-in table."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class PlacementError(PartitionError):
    """No execution provider can take a node, or the placement inputs are inconsistent."""


class RuleDroppedWarning(UserWarning):
    """A rule names a device that matches no available execution provider; it was dropped."""


class RuleUnmatchedWarning(UserWarning):
    """A layer rule matches no node of the graph (a typo, another naming scheme, a range past the last
    layer); the warning names the rule and the closest node names."""


class BudgetOverrunWarning(UserWarning):
    """The Level-2 re-check found a device over its budget (placement is kept as is)."""


class WorkspaceEstimateWarning(UserWarning):
    """A Level-1 workspace estimator failed for a node; the 1.5x heuristic was used instead."""
