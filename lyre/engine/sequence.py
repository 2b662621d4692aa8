"""One generation request and its bookkeeping. Plain Python, no tensors."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from lyre.engine.block_manager import BlockTable
from lyre.engine.constraint import Constraint
from lyre.engine.sampling import SamplingParams

__all__ = ["FinishReason", "Playback", "Request", "RequestStatus"]


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    STOP = "stop"  # produced one of its stop ids
    LENGTH = "length"  # reached max_tokens
    ABORT = "abort"  # aborted by the caller
    ERROR = "error"  # the engine failed while it ran


@dataclass(frozen=True)
class Playback:
    """How a listener consumes a request as it streams.

    ``pace``: seconds of playback one token buys. ``lag_s``: seconds of
    tokens the consumer may hold in flight before they can be played (frames
    waiting to be decoded); parking counts only the slack beyond it.
    ``deadline``: when the listener runs dry, if playback has already started
    (e.g. the sentence before plays now); else the consumer sets it later.
    """

    pace: float
    lag_s: float = 0.0
    deadline: float | None = None

    def __post_init__(self) -> None:
        if not self.pace > 0 or not self.lag_s >= 0:
            raise ValueError(f"playback needs pace > 0 and lag_s >= 0, got {self.pace}, {self.lag_s}")


@dataclass(eq=False)
class Request:
    """A prompt being turned into tokens.

    ``pace`` is the seconds of playback one token buys a listener who plays
    the request as it streams (None: nobody does, as for a whole file), and
    ``lag_s`` the part of its slack still in flight (see `Playback`).
    ``deadline`` is when that listener runs dry if no more tokens come (None
    until playback starts); the scheduler orders streams by it and moves it
    on by ``pace`` with every token. ``adapter`` names a LoRA voice.
    """

    request_id: str
    prompt_ids: list[int]
    sampling: SamplingParams
    seed: int
    constraint: Constraint | None = None
    adapter: str | None = None
    adapter_slot: int | None = None  # its adapter's slot in the LoRA bank, bound at submission
    salt: str = ""  # what its keys and values depend on besides its tokens: which weights (a LoRA voice's)
    cache_output: bool = True  # its output's blocks are sealed for later prefixes (off: only its prompt's)
    pace: float | None = None
    lag_s: float = 0.0
    deadline: float | None = None
    parked: bool = False  # far enough ahead of its listener to sit out of the compute batch
    behind: bool = False  # its listener has run dry (slack below zero)
    arrival: float = field(default_factory=time.monotonic)
    status: RequestStatus = RequestStatus.WAITING
    slot: int | None = None  # its row of per-request state in the runner (sampling, block table)
    kv: BlockTable | None = None  # its KV-cache blocks while resident
    prefilling: bool = False  # admitted, its prompt (or what it had made, when resumed) not all run yet
    preemptions: int = 0  # times its blocks were taken back for others (it then runs its tokens again)
    output_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    admitted_at: float | None = None
    # Engine step counters: when it was submitted, got its first token, ended.
    submit_step: int = 0
    first_token_step: int | None = None
    finish_step: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def tokens(self) -> list[int]:
        """Every token so far, prompt then output: what a resumed request prefills."""
        return self.prompt_ids + self.output_ids

    @property
    def cacheable(self) -> list[int]:
        """The tokens whose whole blocks are sealed for later prefixes."""
        return self.tokens if self.cache_output else self.prompt_ids

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def queue_wait(self) -> float | None:
        return None if self.admitted_at is None else self.admitted_at - self.arrival
