"""Head-role analyzers on hand-built attention with planted behaviour and known answers."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from attnlens.data.conllu import ROOT, DepSentence, sample_treebank
from attnlens.data.rarity import WordRarity
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.head_stats import HeadStats, is_punctuation
from attnlens.measures.heads.positional import PositionalHeads
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.roles import classify_heads, role_evidence
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.measures.heads.syntactic_arcs import ALL_RELATIONS
from attnlens.stream.base import Batch

CLS, SEP, PAD = 101, 102, 0


def make_batch(sentences: list[DepSentence], start: int = 0) -> Batch:
    """One token per word: [CLS] w0 .. wn-1 [SEP] [PAD]..; token ids 1000 + word position."""
    length = max(len(s) for s in sentences) + 2
    ids = torch.full((len(sentences), length), PAD)
    word_ids = torch.full((len(sentences), length), -1)
    mask = torch.zeros(len(sentences), length, dtype=torch.long)
    for b, s in enumerate(sentences):
        n = len(s)
        ids[b, : n + 2] = torch.tensor([CLS, *range(1000, 1000 + n), SEP])
        word_ids[b, 1 : n + 1] = torch.arange(n)
        mask[b, : n + 2] = 1
    return Batch(
        input_ids=ids,
        attention_mask=mask,
        word_ids=word_ids,
        words=[list(s.words) for s in sentences],
        special_mask=(ids == CLS) | (ids == SEP),
        extra={
            "heads": [s.heads for s in sentences],
            "relations": [s.relations for s in sentences],
            "n_words": [len(s) for s in sentences],
            "index": list(range(start, start + len(sentences))),
        },
    )


def peaked(length: int, real: int, target: int, peak: float = 0.6) -> torch.Tensor:
    """A row over ``real`` tokens with ``peak`` on ``target`` and the rest spread evenly."""
    row = torch.zeros(length)
    row[:real] = (1 - peak) / (real - 1)
    row[target] = peak
    return row


def rarest_word(words, rarity: WordRarity) -> int:
    return rarity.rarest(words, k=1)[0]


def planted_patterns(sentences, batch: Batch, rarity: WordRarity) -> torch.Tensor:
    """[batch, head, query_pos, key_pos], heads: 0 previous token, 1 dependent->head,
    2 rarest word, 3 uniform, 4 random."""
    n_b, length = batch.input_ids.shape
    pattern = torch.zeros(n_b, 5, length, length)
    gen = torch.Generator().manual_seed(1)
    for b, s in enumerate(sentences):
        real = len(s) + 2
        rare = rarest_word(s.words, rarity)
        for q in range(real):
            word = q - 1 if 1 <= q <= len(s) else None
            pattern[b, 0, q] = peaked(length, real, max(q - 1, 0))
            head = s.heads[word] if word is not None else ROOT
            pattern[b, 1, q] = peaked(length, real, head + 1 if head != ROOT else real - 1)
            pattern[b, 2, q] = peaked(length, real, rare + 1)
            pattern[b, 3, q, :real] = 1 / real
            pattern[b, 4, q, :real] = torch.softmax(3 * torch.randn(real, generator=gen), 0)
    return pattern


def run(analyzers, batches_and_patterns):
    for batch, pattern in batches_and_patterns:
        cache = ActivationCache({"blocks.0.attn.hook_pattern": pattern})
        for analyzer in analyzers:
            analyzer.update(batch, cache)
    return analyzers


@pytest.fixture(scope="module")
def planted():
    sentences = sample_treebank()
    rarity = WordRarity.wordfreq("en")
    chunks = [sentences[i : i + 8] for i in range(0, len(sentences), 8)]
    data = []
    for n, chunk in enumerate(chunks):
        batch = make_batch(chunk, start=8 * n)
        data.append((batch, planted_patterns(chunk, batch, rarity)))
    return sentences, rarity, data


def analyzers_for(rarity):
    return [
        PositionalHeads(1, 5, threshold=0.9),
        SyntacticHeads(1, 5, min_examples=10),
        RareWordHeads(1, 5, rarity=rarity, threshold=0.5),
    ]


def test_planted_heads_are_classified(planted):
    _, rarity, data = planted
    positional, syntactic, rare = run(analyzers_for(rarity), data)
    pos = positional.result()["positional_heads"].set_index("head")
    # approx's default rel 1e-6 in this test: exact, shares are ratios of integer hit counts
    assert pos.loc[0, "best_offset"] == -1 and pos.loc[0, "share"] == pytest.approx(1.0)
    assert pos["positional"].tolist() == [True, False, False, False, False]

    best = syntactic.result()["syntactic_best"]
    dep_to_head = best[best["direction"] == "dep->head"].set_index("relation")
    for relation in ("det", "nsubj", "obj", "case"):
        assert dep_to_head.loc[relation, "head"] == 1
        assert dep_to_head.loc[relation, "accuracy"] == pytest.approx(1.0)
        assert dep_to_head.loc[relation, "syntactic"]
    # "all relations" pools every arc: reported (Table 1), never a role, so it cannot say
    # syntactic where the summary's count (from the role tests) does not
    pooled_row = dep_to_head.loc[ALL_RELATIONS]
    assert pooled_row["accuracy"] > pooled_row["baseline"] + 0.1 and not pooled_row["tested"]
    assert not best.loc[best["relation"] == ALL_RELATIONS, "syntactic"].any()

    shares = rare.result()["rare_words"].set_index("head")
    assert shares.loc[2, "share_rarest"] == pytest.approx(1.0)
    assert shares.loc[2, "share_two_rarest"] == pytest.approx(1.0)
    assert shares["rare_word"].tolist() == [False, False, True, False, False]

    roles = classify_heads(
        positional.result()["positional_heads"],
        syntactic.result()["syntactic_accuracy"],
        rare.result()["rare_words"],
    ).set_index("head")
    assert roles.loc[0, "roles"] == "positional"
    assert roles.loc[1, "roles"] == "syntactic"
    # A rare-word head can also pass as head->dep syntactic: the rarest word is often a
    # content noun that depends on the attending word (obl, nmod here). Never dep->head.
    assert roles.loc[2, "roles"] in ("rare-word", "syntactic; rare-word")
    assert "dep->head" not in roles.loc[2, "evidence"]
    assert roles.loc[3, "roles"] == "none"  # uniform
    assert roles.loc[4, "roles"] == "none"  # random
    assert "det dep->head" in roles.loc[1, "evidence"]
    evidence = role_evidence(
        positional.result()["positional_heads"],
        syntactic.result()["syntactic_accuracy"],
        rare.result()["rare_words"],
    )
    assert set(evidence["head"]) == {0, 1, 2}


def test_uniform_attention_spreads_credit_over_ties(planted):
    sentences, rarity, data = planted
    positional, syntactic, rare = run(analyzers_for(rarity), data)
    # approx's default rel 1e-6 in this test: tie credits 1/k are fp32 (6e-8 relative each),
    # summed in fp32 over <= 8 sentences per batch, then in float64: <= ~5e-7 relative
    # (measured <= 1.4e-7, identical on every kernel set tried)
    # uniform rows: every real key is a tied maximum, so each offset gets 1/(tokens) credit
    expected = sum(_offset_credit(len(s), -1) for s in sentences) / sum(len(s) for s in sentences)
    shares = positional.shares()  # [target, layer, head]
    assert float(shares[2, 0, 3]) == pytest.approx(expected)  # target "-1"
    acc = syntactic.result()["syntactic_accuracy"]
    uniform = acc[(acc["head"] == 3) & (acc["direction"] == "dep->head")]
    assert not uniform["syntactic"].any()
    # dependent's row over its n-1 other words, all tied: credit 1/(n-1) per arc
    det = uniform[uniform["relation"] == "det"]["accuracy"].item()
    det_arcs = [(s, d) for s in sentences for d, _, r in s.arcs() if r == "det"]
    assert det == pytest.approx(sum(1 / (len(s) - 1) for s, _ in det_arcs) / len(det_arcs))
    # every word (itself included) tied: exactly a random pick
    shares = rare.result()["rare_words"].set_index("head")
    assert shares.loc[3, "share_rarest"] == pytest.approx(shares.loc[3, "chance_rarest"])
    assert shares.loc[3, "share_two_rarest"] == pytest.approx(shares.loc[3, "chance_two_rarest"])


def test_all_attention_on_cls_ties_every_word_but_not_padding():
    # word-level weights are all exactly 0: every real word ties, padding words must not
    short, long = TINY[0], TINY[1]  # 3 and 4 words: the short sentence has a padding word
    batch = make_batch([short, long])
    p = torch.zeros(2, 1, 6, 6)
    p[:, :, :, 0] = 1.0
    rarity = WordRarity.from_counts({"the": 5, "dog": 2, "barks": 1, "a": 5, "big": 3,
                                     "cat": 2, "sleeps": 1})
    syntactic, rare, positional = run(
        [SyntacticHeads(1, 1, min_examples=1), RareWordHeads(1, 1, rarity=rarity),
         PositionalHeads(1, 1)], [(batch, p)]
    )
    acc = syntactic.result()["syntactic_accuracy"].set_index(["relation", "direction"])
    # fp32 tie credits, as in the test above (approx's default rel 1e-6; measured 5.6e-8)
    # det arcs: one in the 3-word sentence (1/2 credit), one in the 4-word one (1/3)
    assert acc.loc[("det", "dep->head"), "accuracy"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert acc.loc[("det", "head->dep (clark code)"), "accuracy"] == pytest.approx(5 / 12)
    row = rare.result()["rare_words"].iloc[0]
    assert row["share_rarest"] == pytest.approx(row["chance_rarest"])
    # token level: every query's maximum is [CLS], at offset -1..-3 for the first 3 words
    shares = positional.shares()[:, 0, 0]
    assert float(shares.sum()) == pytest.approx(1.0)
    assert float(shares[-2]) == pytest.approx(1 / 7)  # far [CLS]: word 4 of the long sentence


def _offset_credit(n_words: int, offset: int) -> float:
    """Credit at ``offset`` for uniform rows of a sentence of n words (+[CLS], [SEP])."""
    real = n_words + 2
    total = 0.0
    for q in range(1, n_words + 1):  # word rows; any real key counts, [CLS]/[SEP] included
        if 0 <= q + offset < real:
            total += 1 / real
    return total


def test_merge_equals_one_pass(planted):
    _, rarity, data = planted
    whole = run(analyzers_for(rarity), data)
    first = run(analyzers_for(rarity), data[:2])
    second = run(analyzers_for(rarity), data[2:])
    for a, b, c in zip(first, second, whole, strict=True):
        merged = a.merge(b).result()
        for name, table in c.result().items():
            # float defaults (rtol 1e-5): the same per-batch values, float64 sums regrouped
            pd.testing.assert_frame_equal(merged[name], table)


TINY = [
    # the dog barks / a big cat sleeps / dogs chase the cat
    DepSentence(("the", "dog", "barks"), (1, 2, ROOT), ("det", "nsubj", "root"), ("X",) * 3),
    DepSentence(("a", "big", "cat", "sleeps"), (2, 2, 3, ROOT),
                ("det", "amod", "nsubj", "root"), ("X",) * 4),
    DepSentence(("dogs", "chase", "the", "cat"), (1, ROOT, 3, 1),
                ("nsubj", "root", "det", "obj"), ("X",) * 4),
]


def test_fixed_offset_baselines_on_a_tiny_treebank():
    batch = make_batch(TINY)
    pattern = torch.full((3, 1, 6, 6), 1 / 6)
    (syntactic,) = run([SyntacticHeads(1, 1, min_examples=1)], [(batch, pattern)])
    base = syntactic.result()["syntactic_baselines"].set_index(["relation", "direction"])
    # det: head at +1, +2, +1 from the dependent -> best +1 in 2 of 3
    # baselines are ratios of integer counts: exact in float64 (approx default rel 1e-6)
    assert base.loc[("det", "dep->head"), "baseline"] == pytest.approx(2 / 3)
    assert base.loc[("det", "dep->head"), "baseline_offset"] == 1
    assert base.loc[("det", "head->dep"), "baseline_offset"] == -1
    assert base.loc[("det", "head->dep (clark code)"), "baseline_offset"] == 1
    assert base.loc[("nsubj", "dep->head"), "baseline"] == pytest.approx(1.0)
    assert base.loc[("obj", "dep->head"), "baseline_offset"] == -2
    assert base.loc[("obj", "head->dep"), "baseline_offset"] == 2
    # all 8 arcs: +1 six times, +2 once, -2 once
    assert base.loc[(ALL_RELATIONS, "dep->head"), "baseline"] == pytest.approx(6 / 8)
    assert base.loc[(ALL_RELATIONS, "dep->head"), "examples"] == 8
    assert syntactic.relations() == ["det", "nsubj", "amod", "obj"]
    with_min = SyntacticHeads(1, 1, min_examples=3)
    run([with_min], [(batch, pattern)])
    assert with_min.relations() == ["det", "nsubj"]
    base_rel = SyntacticHeads(1, 1, min_examples=1, base_relations=True)
    assert base_rel.baseline({1: 2, -1: 2}, "dep->head") == (-1, 0.5)  # tie: negative first


def test_head_to_dependent_differs_from_clarks_released_code():
    # the -> dog (det): dog's own row prefers "barks", but dog attends most to "the"
    sentence = DepSentence(("the", "dog", "barks"), (1, 2, ROOT), ("det", "nsubj", "root"),
                           ("X",) * 3)
    batch = make_batch([sentence])
    p = torch.zeros(1, 1, 5, 5)
    p[0, 0, 1] = torch.tensor([0.1, 0.2, 0.6, 0.0, 0.1])  # the: most on dog
    p[0, 0, 2] = torch.tensor([0.1, 0.3, 0.1, 0.4, 0.1])  # dog: barks 0.4 > the 0.3
    p[0, 0, 3] = torch.tensor([0.1, 0.1, 0.7, 0.0, 0.1])  # barks: the 0.1 < dog 0.3
    p[0, 0, 0] = p[0, 0, 4] = torch.tensor([0.2] * 5)
    (syntactic,) = run([SyntacticHeads(1, 1, min_examples=1)], [(batch, p)])
    acc = syntactic.result()["syntactic_accuracy"].set_index(["relation", "direction"])
    # the dependent's row: the -> dog: hit
    assert acc.loc[("det", "dep->head"), "accuracy"] == 1.0
    # the head's own row (dog) puts its max on barks, not on "the": miss
    assert acc.loc[("det", "head->dep"), "accuracy"] == 0.0
    # Clark's code: who attends most to "the" (its own row excluded)? dog (0.3) > barks (0.1)
    assert acc.loc[("det", "head->dep (clark code)"), "accuracy"] == 1.0


def test_rare_words_with_user_counts_and_word_like_rule():
    rarity = WordRarity.from_counts({"the": 100, "cat": 10, "sat": 20, "zyzzyva": 1})
    words = ["The", "cat", "sat", "!", "zyzzyva", "."]
    # punctuation has frequency 0 but is never the rarest; case is folded
    assert rarity.rarest(words, k=3) == [4, 1, 2]
    assert rarity.frequency("THE") == pytest.approx(100 / 131)  # float64 count ratio: exact
    sentence = DepSentence(tuple(words), (ROOT, 0, 0, 0, 0, 0), ("root",) + ("dep",) * 5,
                           ("X",) * 6)
    batch = make_batch([sentence])
    length = batch.input_ids.shape[1]
    p = torch.zeros(1, 1, length, length)
    # max target per token ([CLS] The cat sat ! zyzzyva . [SEP]): zyzzyva is 5, cat 2
    targets = [0, 5, 5, 2, 5, 1, 5, 7]
    for q, t in enumerate(targets):
        p[0, 0, q] = peaked(length, 8, t)
    (rare,) = run([RareWordHeads(1, 1, rarity=rarity, min_words=1)], [(batch, p)])
    row = rare.result()["rare_words"].iloc[0]
    # exact count ratios below (approx default rel 1e-6)
    # attending words (all but zyzzyva): The, cat, sat, !, . -> hits The, cat, sat, . = 4/5
    assert row["share_rarest"] == pytest.approx(4 / 5)
    # outside {zyzzyva, cat}: The, sat, !, . -> The, sat, ! (on cat), . = 4/4
    assert row["share_two_rarest"] == pytest.approx(1.0)
    assert row["chance_rarest"] == pytest.approx(1 / 6)
    assert row["chance_two_rarest"] == pytest.approx(2 / 6)
    assert row["above_threshold"]  # the point rule
    # one sentence is one cluster: no degree of freedom, so the share is not tested
    assert not row["tested"] and math.isnan(row["p_value"]) and not row["rare_word"]


def test_too_few_words_declare_no_rare_word_head():
    """A head whose every word attends to the rarest word, on 2 sentences (5 attending
    words): the share is reported, but below MIN_WORDS (100) no head is tested or granted
    the role, with or without the bootstrap (its replicates hardly vary on 2 sentences)."""
    from attnlens.measures.heads.rare_words import MIN_WORDS
    from attnlens.stats.bootstrap import Inference

    rarity = WordRarity.from_counts({"the": 9, "dog": 3, "barks": 1, "a": 9, "big": 3,
                                     "cat": 2, "sleeps": 1})
    sentences = [TINY[0], TINY[1]]
    batch = make_batch(sentences)
    length = batch.input_ids.shape[1]
    p = torch.zeros(2, 1, length, length)
    for b, sentence in enumerate(sentences):
        rarest = batch.word_ids[b].tolist().index(rarity.rarest(list(sentence.words))[0])
        p[b, 0, :, rarest] = 1.0  # every token's maximum: the rarest word's token
    for inference in (Inference(), Inference(bootstrap=0)):
        few, enough = run([RareWordHeads(1, 1, rarity=rarity, inference=inference),
                           RareWordHeads(1, 1, rarity=rarity, inference=inference,
                                         min_words=1)], [(batch, p)])
        row = few.result()["rare_words"].iloc[0]
        assert row["words"] < MIN_WORDS and row["share_rarest"] == pytest.approx(1.0)
        assert not row["tested"] and not row["rare_word"] and math.isnan(row["q_value"])
        assert enough.result()["rare_words"].iloc[0]["rare_word"]  # the same data, min 1


def test_too_few_sentences_or_tokens_declare_no_positional_head(planted):
    """Head 0 attends most to the previous token everywhere (share 1.0). On 2 sentences the
    bootstrap's interval has width 0 and p = 0, so without a minimum the head would be
    declared: below MIN_SENTENCES (20) the share is reported but no head is tested or made
    positional, with or without the bootstrap, and the summary and the role map say so. On
    the 43 sample sentences (and >= MIN_TOKENS tokens) the head is found; with
    --min-examples above the corpus's tokens, again not tested."""
    from attnlens.measures.heads.positional import MIN_SENTENCES, MIN_TOKENS
    from attnlens.measures.heads.section import HeadRolesSection
    from attnlens.stats.bootstrap import Inference

    sentences, rarity, data = planted
    two = sentences[:2]
    batch = make_batch(two)
    two_data = [(batch, planted_patterns(two, batch, rarity))]
    for inference in (Inference(), Inference(bootstrap=0)):
        few, lowered = run([PositionalHeads(1, 5, inference=inference),
                            PositionalHeads(1, 5, inference=inference, min_tokens=1,
                                            min_sentences=1)], two_data)
        table = few.result()["positional_heads"]
        row = table.set_index("head").loc[0]
        assert row["n_sentences"] == 2 < MIN_SENTENCES and row["share"] == pytest.approx(1.0)
        assert not table["tested"].any() and not table["positional"].any()
        assert math.isnan(row["q_value"]) and row["above_threshold"]  # point rule: shown
        # the same data without the minimum: declared from 2 sentences
        assert lowered.result()["positional_heads"].set_index("head").loc[0, "positional"]

        whole, short = run([PositionalHeads(1, 5, inference=inference),
                            PositionalHeads(1, 5, inference=inference, min_tokens=10_000)],
                           data)
        found = whole.result()["positional_heads"]
        assert found["n_sentences"].iloc[0] == 43 and found["tokens"].iloc[0] >= MIN_TOKENS
        assert found["positional"].tolist() == [True, False, False, False, False]
        assert not short.result()["positional_heads"]["positional"].any()

    section = HeadRolesSection(inference=Inference())
    tables = {"positional_heads": few.result()["positional_heads"],
              "head_stats": pd.DataFrame(columns=["layer", "head", "measure", "value"])}
    for view, suffix in (("tested", ""), ("uncorrected", "_uncorrected")):
        tables[f"head_roles{suffix}"] = classify_heads(tables["positional_heads"], view=view)
    notes = " ".join(section._notes(tables))
    assert "Positional heads not tested: 2 sentences, fewer than the 20" in notes
    assert "positional 0," in notes and "query tokens" in notes  # 2 sentences < 100 tokens
    title = dict(section.figures(tables))["head_roles_map"].args[1]
    assert title.endswith("not tested (too little data): positional")
    tables["positional_heads"] = found
    assert "not tested" not in " ".join(section._notes(tables))


def test_head_stats_match_hand_computation():
    ids = torch.tensor([[CLS, 1000, 1010, 1001, SEP]])  # [CLS] a , b [SEP]
    batch = Batch(input_ids=ids, attention_mask=torch.ones_like(ids),
                  special_mask=(ids == CLS) | (ids == SEP))
    p = torch.tensor([
        [0.2, 0.2, 0.2, 0.2, 0.2],  # [CLS] row: excluded
        [0.5, 0.2, 0.1, 0.1, 0.1],  # a
        [0.1, 0.6, 0.1, 0.1, 0.1],  # ,
        [0.2, 0.2, 0.2, 0.2, 0.2],  # b
        [0.0, 0.0, 0.0, 0.0, 1.0],  # [SEP] row: excluded
    ])[None, None]
    stats = HeadStats(1, 1, cls_ids={CLS}, sep_ids={SEP}, punct_ids={1010})
    stats.update(batch, ActivationCache({"blocks.0.attn.hook_pattern": p}))
    table = stats.result()["head_stats"].set_index("measure")["value"]
    rows = p[0, 0, 1:4]
    entropy = sum(-x * math.log(x) for r in rows.tolist() for x in r) / 3
    expected = {
        "confidence": (0.5 + 0.6 + 0.2) / 3,
        "entropy": entropy,
        "to_cls": (0.5 + 0.1 + 0.2) / 3,
        "to_sep": (0.1 + 0.1 + 0.2) / 3,
        "to_punct": (0.1 + 0.1 + 0.2) / 3,
        "to_self": (0.2 + 0.1 + 0.2) / 3,
        # rows with a real previous / next word token only: not a's [CLS], not b's [SEP]
        "to_prev": (0.6 + 0.2) / 2,
        "to_next": (0.1 + 0.1) / 2,
        "distance": (1.1 + 1.1 + 1.4) / 3,
    }
    # fp32 sums over 3 rows x 5 keys (entropy with the kernel set's vectorised log, a few ulps
    # per term) against float64 sums of |v| ~ 1.4: 15 x 3e-8 ~ 5e-7 -> 1e-5 (measured 4.9e-8)
    for measure, value in expected.items():
        assert table[measure] == pytest.approx(value, abs=1e-5), measure
    assert stats.result()["head_stats"]["level"].unique().tolist() == ["token"]


def test_punctuation_tokens():
    assert [is_punctuation(t) for t in [",", "##.", "Ġ?", "...", "a", "##s", "", "$"]] == [
        True, True, True, True, False, False, False, False
    ]
