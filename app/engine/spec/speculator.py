"""Speculation in the step: which greedy sequences draft how many tokens (drafters.py says what pays),
and the verification of their guesses after the decode, in the same batch as everyone's next token."""

from __future__ import annotations

from ..kv.manager import KVCacheManager
from ..params import EngineConfig, SpecType
from ..sampling.draw import Draw
from ..sampling.drawer import Drawer, greedy
from ..sched.plan import StepPlan
from ..sequence import Sequence
from ..step_cost import StepCost
from .drafters import Drafter, NgramDrafter, could_pay


class Speculator:
    def __init__(self, config: EngineConfig, backend, kv: KVCacheManager, step_cost: StepCost):
        self.config = config
        self.backend = backend
        self.kv = kv
        self.step_cost = step_cost
        self.drafted = self.accepted = 0

    def draft(self, plan: StepPlan) -> StepPlan:
        """The plan with a draft of their next tokens for the greedy sequences decoding in it, within
        the step's token budget, their room and their reply's length."""
        decoding = [
            seq
            for seq in plan.seqs
            if seq.is_decoding and greedy(seq) and seq.params.speculate and not seq.thinks_on_budget and not seq.images
        ]  # a chat with pictures: no guess from its placeholders, and a draft model cannot read them
        config = self.config
        if config.spec_type is SpecType.NONE or self.backend.drafts_refused or not decoding:
            return plan
        model = self.backend.draft
        n_step = sum(plan.n_tokens.values())
        cells = min(self.kv.free_cells, self.backend.n_ctx) - n_step
        most = min(config.n_batch - n_step, cells, config.spec_draft_n_max)
        guess_s = model.guess_s if model else 0.0
        if not config.spec_draft_n_min and not could_pay(self.step_cost, n_step, most, guess_s):
            return plan  # a step this large: no guess would pay, for any sequence of it
        lengths: list[tuple[Sequence, int]] = []
        drafts: dict[Sequence, tuple[int, ...]] = {}
        for seq in decoding:
            if seq.drafter is None:
                kind = NgramDrafter if model is None else Drafter
                seq.drafter = kind(config.spec_draft_n_min, config.spec_draft_n_max)
            own_room = self.backend.n_ctx_seq - len(seq.tokens)  # its stream's, or the pool's
            left = seq.params.max_tokens - seq.num_generated - 1  # the token after the draft is one more
            room = min(config.n_batch - n_step, cells, own_room, left)
            n = seq.drafter.length(self.step_cost, n_step, room, guess_s)
            if model is None:
                drafts[seq] = tuple(seq.drafter.draft(seq.tokens, n))
                n = len(drafts[seq])
            elif n < max(1, config.spec_draft_n_min):
                continue
            lengths.append((seq, n))
            n_step += n  # a draft model's may end sooner
            cells -= n
        if model is not None and lengths:
            drafts = self._guess(model, lengths)
        return plan.with_drafts(drafts)

    def _guess(self, model, lengths: list[tuple[Sequence, int]]) -> dict[Sequence, tuple[int, ...]]:
        """Drafts from the draft model for every sequence in `lengths` at once."""
        n_min = self.config.spec_draft_n_min
        drafts = model.draft([(seq.slot_id, seq.tokens, n) for seq, n in lengths], self.config.spec_draft_p_min)
        return {seq: tuple(draft) if len(draft) >= n_min else () for (seq, _), draft in zip(lengths, drafts, strict=True)}

    def verify(self, seq: Sequence, draft: tuple[int, ...], row: int, drawer: Drawer) -> list[int]:
        """The tokens the greedy choice confirms, to take in order: at each drafted row the top token
        (after the chain's penalties, drawn row by row so that each sees the tokens taken before it;
        under a grammar, of the row masked as the guesses before it leave it), as long as it is the
        draft's next; then one more (the first that differs, or the one after the whole draft). The
        cells of the wrong guesses go."""
        rows = list(range(row, row + len(draft) + 1))
        drawer.mask_drafted(seq, rows, draft)
        samplers, vocab = self.backend.samplers, self.backend.vocab
        tops = samplers.top_tokens(rows) if seq.draw is Draw.ARGMAX else None
        tokens = []
        for i, at in enumerate(rows):
            if tops is None or (seq.params.ignore_eos and vocab.is_eog(tops[i])):
                token = samplers.sample(seq.sampler, at)  # the chain's own draw: it bans end-of-generation when told to
            else:
                token = tops[i]
            tokens.append(token)
            if i == len(draft) or token != draft[i]:
                break
        accepted = len(tokens) - 1
        self.kv.commit_drafted(seq, list(draft[:accepted]), len(draft))
        seq.drafter.verified(len(draft), accepted)
        seq.stats.drafted_tokens += len(draft)
        seq.stats.accepted_tokens += accepted
        self.drafted += len(draft)
        self.accepted += accepted
        return tokens
