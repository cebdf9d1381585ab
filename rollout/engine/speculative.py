"""Speculative decoding with the model's own MTP layer as the draft (GLM-5's, model/mtp.py), as SGLang serves GLM-5
with `--speculative-algorithm EAGLE` and one draft per step (topk 1).

Each verification step of a row feeds the model its last sampled token and `steps` draft tokens at once; the model's
logits at those positions decide how many drafts stand, and give the next token after them:
- greedy: a draft stands while it is the model's argmax; the next token is the model's argmax where the first one
  did not (greedy output is the model's own, token for token);
- sampled: the standard rule (Leviathan et al. 2023, Chen et al. 2023): draft d, drawn from the draft's
  distribution q, stands with probability min(1, p(d)/q(d)); the first that does not is replaced by a draw from
  max(p − q, 0), normalised; after `steps` that stand, one more token is drawn from p. Each token is then
  distributed exactly as plain sampling from p would draw it. p and q are both after the request's truncations
  (top-k, top-p, min-p), as plain sampling draws.
The logprob returned with a token is the model's (`sample`'s: softmax(logits / temperature), before truncation), so
IcePop and importance sampling see what they would see without speculation.

The draft: the MTP layer reads the model's hidden state at a position and the token after it, and predicts the
token after that; chained, its own output stands in for the model's hidden state. Its keys over the tokens the model
has verified are kept in a cache of its own (`DraftCache`); the chain's are not.

Layout: every row of a step verifies the same number of tokens, so each step appends `steps + 1` columns to the
model's KV cache and to the draft's; the columns of drafts that did not stand stay, never visible again (the
attention masks hide them), and each row's positions count its accepted tokens only. A row leaves the batch when it
ends, as in plain decoding.

When: the engine decodes a batch plainly while more than `max_rows` of its rows decode, then hands it over
(`resume`), the draft reading every column so far at once from a backlog the plain steps kept (the model's hidden
states, tokens, positions). A verification forward over `steps + 1` tokens per row costs about one plain step only
while the device is not already busy with the batch's rows: a large batch decodes faster plainly, and its tail
(the few long completions left) speculatively.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from rollout.engine.columns import Columns
from rollout.engine.decode_step import DecodeStep
from rollout.engine.drafter import DraftCache, Drafter
from rollout.engine.sampling import draw, sampling_distribution
from rollout.protocol import GREEDY_BELOW, FinishReason, SamplingParams


@dataclass
class Rows:
    """What speculative decoding keeps per prompt of a batch."""

    budgets: list[int]
    stops: set[int]
    outputs: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    finish: list[FinishReason | None] = field(default_factory=list)
    verify_steps: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def __post_init__(self):
        count = len(self.budgets)
        self.outputs, self.logprobs = [[] for _ in range(count)], [[] for _ in range(count)]
        self.finish = [FinishReason(type="length", length=0) if budget == 0 else None for budget in self.budgets]
        self.verify_steps, self.drafted, self.accepted = [0] * count, [0] * count, [0] * count

    def take(self, row: int, token: int, logprob: float) -> bool:
        """One more token of `row`; True once the row has ended."""
        self.outputs[row].append(token)
        self.logprobs[row].append(logprob)
        if token in self.stops:
            self.finish[row] = FinishReason(type="stop", matched=token)
        elif len(self.outputs[row]) == self.budgets[row]:
            self.finish[row] = FinishReason(type="length", length=len(self.outputs[row]))
        return self.finish[row] is not None


class RoutingRecord(Protocol):
    """Where the routers' choices of each forward go (rollout/engine/generation.py's RoutedPositions)."""

    def prefilled(self, width: int) -> None: ...

    def verified(self, active: list[int], width: int, kept: list[int]) -> None:
        """After a verification forward of `width` columns: row `active[i]` keeps its first `kept[i]` columns."""


class SpeculativeDecoder:
    """`resume(backlog, tokens, cache, params, generator, rows, active)` takes over a batch from plain decoding (the
    engine's, rollout/engine/generation.py): after a prefill, or after some plain steps when the batch had more rows
    than `max_rows` (None: speculate at any size). Speculating costs a verification forward over `steps + 1` tokens
    per row and the drafts; it pays where a decoding step costs little more for a few tokens per row than for one —
    few rows, or a device where a step reads more weights than it computes — and loses where the batch alone keeps
    the device busy (vLLM's speculative_disable_by_batch_size, SGLang's --speculative-adaptive batch-size tiers).

    With `routed`, the routers' choices at every position the sequence keeps go there, as plain decoding records
    them (routing replay): from each verification forward the columns of the tokens that stood (the fed token and
    the drafts before the last token taken). The verification forward is the model's own over those tokens, so they
    are the experts the model routes them to; a draft's column that did not stand is dropped with it."""

    def __init__(self, model: torch.nn.Module, steps: int, decode_step: DecodeStep | None, max_rows: int | None = None):
        self.model, self.steps, self.max_rows, self.drafter = model, steps, max_rows, Drafter(model)
        # The verification forward: the engine's decoding step over several tokens, where it covers the model.
        self.decode_step = decode_step

    def refresh(self) -> None:
        """After a weight update (the decoding step's own refresh is the engine's)."""
        self.drafter.refresh()

    def takes_over(self, rows_decoding: int) -> bool:
        return self.max_rows is None or rows_decoding <= self.max_rows

    def resume(self, backlog: Backlog, tokens: torch.Tensor, cache, params: SamplingParams,
               generator: torch.Generator, rows: Rows, active: list[int], routed: RoutingRecord | None = None) -> None:
        """Decode the batch's rows `active` (by prompt index; those that ended already leave here) to their end.
        `tokens` [B]: each row's last sampled token, not yet in the model's `cache`; `backlog`: every column the cache
        holds, which the draft has not read."""
        # The draft's keys over every column so far: the model's hidden state at each with the token after it.
        following = torch.cat([backlog["ids"][:, 1:], tokens[:, None]], dim=1)
        positions, visible = backlog["positions"], backlog["visible"]
        drafts, outputs = self.drafter.extend(None, backlog["hidden"], following, positions + 1, visible)
        state = Step(tokens=tokens, positions=positions[:, -1] + 1, draft_output=outputs[:, -1], visible=visible,
                     drafts=drafts)
        decoding = [position for position, row in enumerate(active) if rows.finish[row] is None]
        state.select(torch.tensor(decoding, dtype=torch.long, device=tokens.device), cache)
        active = [active[position] for position in decoding]
        while active:
            active = self.verify(state, cache, params, generator, rows, active, routed)

    def verify(self, state: Step, cache, params: SamplingParams, generator: torch.Generator, rows: Rows,
               active: list[int], routed: RoutingRecord | None = None) -> list[int]:
        """One verification step of every active row: its rows still decoding after it."""
        model, steps = self.model, self.steps
        draft_tokens, draft_probs = self.draft(state, params, generator)
        fed = torch.cat([state.tokens[:, None], draft_tokens], dim=1)  # [B, steps + 1]
        fed_positions = state.positions[:, None] + torch.arange(steps + 1, device=fed.device)
        causal = torch.ones(steps + 1, steps + 1, dtype=torch.bool, device=fed.device).tril()
        allowed = torch.cat([state.visible[:, None, :].expand(-1, steps + 1, -1), causal.expand(len(active), -1, -1)],
                            dim=2)  # [B, steps + 1, width + steps + 1]
        if self.decode_step is not None:
            hidden = self.decode_step.forward(fed, fed_positions, cache, ~allowed)
        else:
            hidden = model.get_decoder()(input_ids=fed, attention_mask=allowed[:, None], position_ids=fed_positions,
                                         cache=cache, use_cache=True).last_hidden_state
        logits = model.lm_head(hidden).float()  # [B, steps + 1, V]: after each fed token
        target, reported = sampling_distribution(logits.flatten(0, 1), params)
        target, reported = normalised(target).view(*logits.shape), reported.view(*logits.shape)
        stood, following = self.accept(draft_tokens, draft_probs, target, params, generator)
        next_tokens = torch.cat([draft_tokens, following[:, None]], dim=1)
        next_tokens.scatter_(1, stood[:, None], following[:, None])  # the drafts that stood, then the token after
        ended, kept = [], []
        taken_logprobs = reported.gather(2, next_tokens[..., None])[..., 0].tolist()  # one transfer, not one per token
        for position, (row, count, tokens) in enumerate(zip(active, stood.tolist(), next_tokens.tolist(), strict=True)):
            rows.verify_steps[row] += 1
            rows.drafted[row] += steps
            for index in range(count + 1):
                if rows.take(row, tokens[index], taken_logprobs[position][index]):
                    ended.append(row)
                    break
            # The drafts the row kept (those that stood past its end are not its tokens): a step gave 1 + these.
            rows.accepted[row] += index
            kept.append(index + 1)  # each token taken was predicted at a fed column the sequence keeps
        if routed is not None:
            routed.verified(active, steps + 1, kept)
        # The model's cache got every fed column: those after the drafts that stood stay hidden from here on.
        real = torch.arange(steps + 1, device=fed.device)[None] <= stood[:, None]
        state.visible = torch.cat([state.visible, real], dim=1)
        state.drafts, outputs = self.drafter.extend(state.drafts, hidden, next_tokens, fed_positions + 1, real)
        state.tokens = following
        state.positions = state.positions + stood + 1
        state.draft_output = outputs[torch.arange(len(active)), stood]
        keep = [position for position, row in enumerate(active) if row not in ended]
        if keep and len(keep) < len(active):
            state.select(torch.tensor(keep, dtype=torch.long, device=fed.device), cache)
        return [active[position] for position in keep]

    def draft(self, state: Step, params: SamplingParams, generator: torch.Generator):
        """`steps` draft tokens per row [B, steps] and the draft distributions they were drawn from [B, steps, V]
        (None when greedy)."""
        tokens, distributions = [], []
        output = state.draft_output
        for depth in range(self.steps):
            logits = self.drafter.logits(output).float()
            if params.temperature < GREEDY_BELOW:
                token = logits.argmax(dim=-1)
            else:
                probs = normalised(sampling_distribution(logits, params)[0])
                token = draw(probs, generator)
                distributions.append(probs)
            tokens.append(token)
            if depth + 1 < self.steps:
                output = self.drafter.chain(state.drafts, output, token, state.positions + depth + 1, depth)
        return torch.stack(tokens, dim=1), torch.stack(distributions, dim=1) if distributions else None

    def accept(self, drafts: torch.Tensor, draft_probs: torch.Tensor | None, target: torch.Tensor,
               params: SamplingParams, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(how many drafts stand per row [B], the token after them [B])."""
        batch, steps = drafts.shape
        if draft_probs is None:  # greedy: `target` is one-hot on the model's argmax
            best = target.argmax(dim=-1)  # [B, steps + 1]
            agrees = best[:, :steps] == drafts
        else:
            p = target[:, :steps].gather(-1, drafts[..., None]).squeeze(-1)
            q = draft_probs.gather(-1, drafts[..., None]).squeeze(-1)
            uniform = torch.rand((batch, steps), generator=generator, dtype=torch.float64).to(p.device)
            agrees = uniform * q.double() < p.double()  # u < p/q, without dividing by a q of 0
        stood = (agrees.long().cumprod(dim=1)).sum(dim=1)  # [B]: the drafts before the first that did not stand
        rows = torch.arange(batch, device=drafts.device)
        if draft_probs is None:
            return stood, best[rows, stood]
        after = target[rows, stood]  # p where all stood (the bonus token), else the residual's p
        rejected = stood < steps
        if rejected.any():
            residual = (target[rows, stood.clamp(max=steps - 1)] - draft_probs[rows, stood.clamp(max=steps - 1)]).clamp(min=0)
            # An all-zero residual (p = q, which a rejection makes impossible but rounding may not): p itself.
            empty = residual.sum(dim=-1, keepdim=True) <= 0
            residual = torch.where(empty, target[rows, stood.clamp(max=steps - 1)], residual)
            after = torch.where(rejected[:, None], residual, after)
        return stood, draw(after, generator)


@dataclass
class Step:
    """The batch's state between verification steps, for the rows still decoding."""

    tokens: torch.Tensor  # [B]: the last sampled token, not yet in the model's cache
    positions: torch.Tensor  # [B]: its position
    draft_output: torch.Tensor  # [B, H]: the draft's output that predicts the token after it
    visible: torch.Tensor  # [B, T]: the model's cache columns each row sees
    drafts: DraftCache

    def select(self, keep: torch.Tensor, cache) -> None:
        cache.batch_select_indices(keep)
        self.tokens, self.positions, self.draft_output = self.tokens[keep], self.positions[keep], self.draft_output[keep]
        self.visible = self.visible[keep]
        self.drafts.select(keep)


class Backlog:
    """What the draft needs of the columns in the model's cache, kept while a batch decodes plainly before
    speculation takes over: the model's last hidden state [B, C, H], the token fed [B, C], its position and whether
    it is real (not padding) [B, C]. `append` after each forward; `select` as the cache's rows. Its memory is a
    layer's worth of the KV cache in the model's dtype (B × C × hidden): it is kept only where speculation is on,
    and the hand-over extends the draft over all C columns at once (attention over C² per row and head)."""

    def __init__(self, hidden: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor,
                 room: int = 0):
        self.columns = Columns(hidden.shape[1] + room, hidden=hidden, ids=ids, positions=positions, visible=visible)
        self.length = 0
        self.append(hidden, ids, positions, visible)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.columns[name][:, :self.length]

    def append(self, hidden: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor) -> None:
        self.columns.write(self.length, hidden=hidden, ids=ids, positions=positions, visible=visible)
        self.length += hidden.shape[1]

    def select(self, rows: torch.Tensor) -> None:
        self.columns.select(rows)


def normalised(probs: torch.Tensor) -> torch.Tensor:
    """Truncated probabilities (`sampling_distribution`'s, which `draw` reads up to scale) summing to 1: the
    acceptance rule compares them across two distributions."""
    return probs / probs.sum(dim=-1, keepdim=True)
