"""The explanations, references and table/figure captions of the built-in report sections.

Each ``Section`` class points at one of these as its ``doc`` (see ``catalog.py`` for how to
write one for a new section).
"""

from __future__ import annotations

from attnlens.report.catalog import CardItem, FigureDoc, Paper, SectionDoc, TableDoc

CLARK = Paper("Clark et al. 2019, What Does BERT Look At? An Analysis of BERT's Attention",
              "https://arxiv.org/abs/1906.04341")
VOITA = Paper("Voita et al. 2019, Analyzing Multi-Head Self-Attention: Specialized Heads Do "
              "the Heavy Lifting, the Rest Can Be Pruned", "https://arxiv.org/abs/1905.09418")
LINFORMER = Paper("Wang et al. 2020, Linformer: Self-Attention with Linear Complexity",
                  "https://arxiv.org/abs/2006.04768")
CORDONNIER = Paper("Cordonnier et al. 2020, Multi-Head Attention: Collaborate Instead of "
                   "Concatenate", "https://arxiv.org/abs/2006.16362")
VASWANI = Paper("Vaswani et al. 2017, Attention Is All You Need",
                "https://arxiv.org/abs/1706.03762")
DONG = Paper("Dong et al. 2021, Attention is Not All You Need: Pure Attention Loses Rank "
             "Doubly Exponentially with Depth", "https://arxiv.org/abs/2103.03404")
MICHEL = Paper("Michel et al. 2019, Are Sixteen Heads Really Better than One?",
               "https://arxiv.org/abs/1905.10650")

MAIN_DIRECTIONS = (("direction", ("dep->head", "head->dep")),)

HEADS = SectionDoc(
    about=(
        "Clark et al.'s per-head statistics (how peaked each head's attention is, how much "
        "goes to [CLS], [SEP], punctuation and the neighbouring tokens) and the roles Voita "
        "et al. found heads to play. A positional head sends most tokens' strongest attention "
        "to one fixed offset; a syntactic head points from a word to its dependency head (or "
        "dependent) clearly more often than the best fixed-offset guess; a rare-word head "
        "attends to the sentence's rarest word. Statistics are over tokens, roles over words."
    ),
    papers=(CLARK, VOITA),
    command="attnlens heads",
    tables=(
        TableDoc("head_roles", "One row per head: its tested roles (q < alpha after the "
                 "multiple-testing correction) or none, and the evidence."),
        TableDoc("role_tests", "Every candidate role tested: estimate, 95 % bootstrap interval "
                 "over sentences, what it is compared to, p-value and corrected q-value."),
        TableDoc("role_evidence", "One row per head and tested role found, with what it beat."),
        TableDoc("head_roles_uncorrected", "Roles by the uncorrected point rules (share >= "
                 "threshold; accuracy >= baseline + margin), for comparison with earlier work."),
        TableDoc("role_evidence_uncorrected", "Evidence of the uncorrected roles."),
        TableDoc("head_stats", "Token-level statistics, one row per layer, head and measure "
                 "(sink: attention to the first token, pooled per sentence; Gu et al.).",
                 pivot=("measure", "value")),
        TableDoc("syntactic_table1", "Best head per relation and direction against the "
                 "best fixed-offset baseline (Clark et al.'s Table 1 format)."),
        TableDoc("syntactic_best", "Best head per relation and direction, with its margin."),
        TableDoc("syntactic_heldout", "Best head per relation chosen on held-out sentences "
                 "(--select-on, or a seeded half) and its accuracy on the others."),
        TableDoc("syntactic_accuracy", "Accuracy of every head for every relation and "
                 "direction."),
        TableDoc("syntactic_baselines", "Best fixed-offset baseline per relation."),
        TableDoc("positional_heads", "Each head's most frequent offset of maximum attention."),
        TableDoc("positional_offsets", "Share of tokens whose maximum-attention token is at "
                 "each offset.", pivot=("target", "share")),
        TableDoc("rare_words", "Share of words attending most to the sentence's rarest word, "
                 "against chance."),
        TableDoc("head_behaviour", "Share of attention that is vertical (to one key for all "
                 "queries), diagonal (to a fixed offset) or broad, per head, with intervals."),
        TableDoc("head_behaviour_classes", "Each head's behaviour shares side by side and its "
                 "dominant class."),
        TableDoc("head_distances", "Mean Jensen-Shannon divergence between every pair of heads' "
                 "attention (nats)."),
        TableDoc("head_embedding", "2-D MDS embedding of the heads by those distances, with "
                 "their roles."),
    ),
    figures=(
        FigureDoc("head_roles_map", "Tested head roles: P±k positional at offset k, Sn "
                  "syntactic for n relations, R rare-word; Ind, Dup, Prev, Snk, Ret the "
                  "induction, duplicate-token, previous-token, sink and retrieval heads."),
        FigureDoc("head_roles_map_uncorrected", "The same map by the uncorrected point rules."),
        FigureDoc("head_behaviour", "Vertical, diagonal and broad attention per head."),
        FigureDoc("head_embedding", "Heads placed by how alike their attention is (MDS)."),
        FigureDoc("head_distances", "Jensen-Shannon divergence between every pair of heads."),
        FigureDoc("positional_share", "Share of tokens at each head's best offset."),
        FigureDoc("rare_word_share", "Share of words attending most to the rarest word."),
        FigureDoc("syntactic_dep_to_head", "Accuracy per relation, dependent -> head."),
        FigureDoc("syntactic_head_to_dep", "Accuracy per relation, head -> dependent."),
    ),
    card=(
        CardItem("head_roles", "Roles", kind="row",
                 columns=("roles", "evidence", "best_offset", "offset_share", "best_relation",
                          "relation_accuracy", "relation_baseline", "share_rarest")),
        CardItem("role_evidence", "Evidence", kind="rows",
                 columns=("role", "detail", "value", "compared_to", "ci_low", "ci_high",
                          "q_value")),
        CardItem("head_stats", "Attention statistics", kind="measures"),
        CardItem("positional_offsets", "Offset of the maximum-attention token", kind="curve",
                 x="target"),
        CardItem("syntactic_accuracy", "Best relations", kind="top", sort="accuracy",
                 columns=("relation", "direction", "accuracy", "baseline", "examples"),
                 where=MAIN_DIRECTIONS),
    ),
)

SPECTRUM = SectionDoc(
    about=(
        "How low-rank each head's attention matrices are. For the n x n attention matrix P "
        "of a sentence, C(k) is the share of the sum of singular values held by the k "
        "largest (Linformer's normalised cumulative spectrum); C(n/4) near 1 means a rank-n/4 "
        "projection loses little. The weight part counts the dimensions each head's "
        "W_Q W_K^T uses, and how much the heads of a layer share them (Cordonnier et al.)."
    ),
    papers=(LINFORMER, CORDONNIER),
    command="attnlens spectrum",
    tables=(
        TableDoc("spectrum_summary", "Per head: C(n/4), effective rank and the ranks holding "
                 "90 % and 99 % (also as fractions of n).", pivot=("measure", "value")),
        TableDoc("spectrum_curve", "C(k) at k/n = 0.05 .. 1, per head.",
                 pivot=("fraction", "value"), keys=("fraction",)),
        TableDoc("spectrum_curve_by_length", "C(k) at absolute k per sentence-length bucket.",
                 keys=("k", "sentences")),
        TableDoc("low_rank_cost", "Errors of rank-k truncations and of random Linformer "
                 "projections.", keys=("k_fraction",)),
        TableDoc("circuit_summary", "Spectra summaries of every head's QK and OV circuit "
                 "(rotary models: QK at relative offset 0, and *_offsets_mean the mean of "
                 "each measure over offsets).", pivot=("measure", "value")),
        TableDoc("circuit_spectra", "Every singular value of every head's QK and OV circuit "
                 "(rotary models: QK at relative offset 0, QK_offsets_mean the mean over "
                 "offsets).", keys=("index",)),
        TableDoc("shared_subspace_dims", "Dimensions holding 90/95/99 % of the energy: all "
                 "heads of a layer together against each head alone (rotary models: W_QK "
                 "at relative offset 0).", keys=("energy",)),
        TableDoc("shared_subspace_curve", "Cumulative energy against dimensions, per layer.",
                 keys=("k",)),
    ),
    figures=(
        FigureDoc("spectrum_at_quarter", "C(n/4) per head: the share of the singular-value "
                  "sum in the top quarter."),
        FigureDoc("spectrum_curves", "C(k) against k/n per layer (band: min..max over heads)."),
        FigureDoc("spectrum_output_error", "Relative error of the head output at rank n/4."),
        FigureDoc("shared_subspace", "Shared query/key subspaces: all heads of a layer "
                  "(solid) against one head (dashed)."),
        FigureDoc("qk_effective_rank", "Effective rank of each head's W_Q W_K^T."),
    ),
    card=(
        CardItem("spectrum_summary", "Spectrum", kind="measures"),
        CardItem("spectrum_curve", "Cumulative singular values C(k) against k/n", kind="curve",
                 x="fraction"),
        CardItem("circuit_summary", "QK and OV circuits", kind="measures"),
    ),
)

ASYMMETRY = SectionDoc(
    about=(
        "Whether attention is one-way. A head scores the pair (i, j) with x_i W_Q W_K^T x_j; "
        "the antisymmetric part of W_Q W_K^T is what makes i's interest in j differ from j's "
        "in i (antisym_share: its share of the squared Frobenius norm). On the corpus, "
        "asym_ratio = ||P - P^T||_F / ||P||_F and directed_share (pairs whose stronger "
        "direction carries twice the weaker) are compared with unweighted, symmetric-logit "
        "self-attention softmax(X X^T / sqrt(C)) on the same layer inputs."
    ),
    papers=(VASWANI,),
    command="attnlens asymmetry",
    tables=(
        TableDoc("weight_asymmetry", "Symmetric and antisymmetric shares of each head's "
                 "W_Q W_K^T (with and without biases).", pivot=("measure", "value")),
        TableDoc("pattern_asymmetry", "Asymmetry of the attention patterns on the corpus.",
                 pivot=("measure", "value")),
        TableDoc("asymmetry_baseline", "The same measures for the symmetric-logit baseline.",
                 pivot=("measure", "value")),
    ),
    figures=(
        FigureDoc("asymmetry_weights", "Antisymmetric share of ||W_Q W_K^T||²."),
        FigureDoc("asymmetry_patterns", "Pattern asymmetry ||P - P^T|| / ||P||."),
        FigureDoc("asymmetry_directed", "Share of attended pairs that are one-way."),
    ),
    card=(
        CardItem("weight_asymmetry", "Weight asymmetry", kind="measures"),
        CardItem("pattern_asymmetry", "Pattern asymmetry", kind="measures"),
    ),
)

COLLAPSE = SectionDoc(
    about=(
        "Pure self-attention drives token representations towards one shared vector (rank "
        "one) doubly exponentially fast with depth; skip connections prevent it (Dong et al.). "
        "The relative residual ||X - 1 x^T|| / ||X|| is measured after each block of the "
        "model's own weights with parts removed (san: attention only; +skip, +mlp, +ln; full "
        "block), and for products of attention matrices along paths of heads."
    ),
    papers=(DONG,),
    command="attnlens collapse",
    tables=(
        TableDoc("collapse_variants", "Relative residual per block variant and depth."),
        TableDoc("collapse_fits", "Doubly exponential and exponential fits of the decay."),
        TableDoc("path_collapse", "Rank-1 residual of head-path attention products by length."),
        TableDoc("path_samples", "Every sampled path (L0H4 > L1H9: head 4 of layer 0, then "
                 "head 9 of layer 1)."),
    ),
    figures=(
        FigureDoc("collapse_variants", "Relative residual against depth per block variant."),
        FigureDoc("path_collapse", "Rank-1 residual of attention products along head paths."),
    ),
)

PRUNE = SectionDoc(
    about=(
        "What each head is worth to a real metric. Importance is Michel et al.'s expected "
        "absolute gradient of the loss with respect to a gate on the head's output, "
        "normalised within each layer; heads are then removed in order of increasing "
        "importance and the metric is measured on held-out data after every step."
    ),
    papers=(MICHEL, VOITA),
    command="attnlens prune",
    tables=(
        TableDoc("head_importance", "Importance of every head on the unpruned model (higher: "
                 "keep) and its rank (1 = most important)."),
        TableDoc("prune_curve", "The metric after each pruning step, per order and seed."),
        TableDoc("prune_scores", "Every score used, per order, seed and step."),
    ),
    figures=(FigureDoc("prune_curve", "The metric against the fraction of heads pruned."),),
    card=(CardItem("head_importance", "Importance (pruning run)", kind="row",
                   columns=("score", "rank")),),
)

# Rollout/flow, sparse coverage, linear attention (issue 16) ----------------------------------
ABNAR = Paper("Abnar & Zuidema 2020, Quantifying Attention Flow in Transformers",
              "https://arxiv.org/abs/2005.00928")
BIGBIRD_PAPER = Paper("Zaheer et al. 2020, Big Bird: Transformers for Longer Sequences",
                      "https://arxiv.org/abs/2007.14062")
LONGFORMER = Paper("Beltagy et al. 2020, Longformer: The Long-Document Transformer",
                   "https://arxiv.org/abs/2004.05150")
SCHLAG = Paper("Schlag et al. 2021, Linear Transformers Are Secretly Fast Weight Programmers",
               "https://arxiv.org/abs/2102.11174")
KATHAROPOULOS = Paper("Katharopoulos et al. 2020, Transformers are RNNs: Fast Autoregressive "
                      "Transformers with Linear Attention", "https://arxiv.org/abs/2006.16236")

ROLLOUT = SectionDoc(
    about=(
        "Which input tokens a position draws on after several layers have mixed them. "
        "Rollout: per layer Ã_l = r·fuse_heads(A_l) + (1-r)·I with rows renormalised, "
        "R_0 = Ã_0, R_l = Ã_l R_(l-1); R_l[i, j] is the share of input token j in position i "
        "after block l (positions from 0, special tokens included). Flow replaces the product "
        "by the maximum flow through the layered graph with those capacities."
    ),
    papers=(ABNAR,),
    command="attnlens rollout",
    tables=(
        TableDoc("rollout_layers", "Per layer, means over query rows: mass on special tokens, "
                 "on the token itself, information moved by the block (total variation "
                 "between R_l and R_(l-1) rows), source distance, mixing of the block alone.",
                 pivot=("measure", "value")),
        TableDoc("rollout", "Rollout matrices of the kept sentences (one row per layer, query "
                 "and key position)."),
        TableDoc("flow", "Attention flow of the kept sentences (rows normalised; max_flow: "
                 "the raw maximum flow)."),
    ),
    figures=(FigureDoc("rollout_layers", "Rollout shares and mixing by layer."),),
)

SPARSE = SectionDoc(
    about=(
        "How much of each head's attention a sparse pattern would keep: a local window "
        "|i - j| <= w, global tokens (special tokens plus the first g positions), both, and "
        "BigBird (window, global and seeded random keys) against as many random keys. "
        "output_error = ||(P - P_S) V|| / ||P V|| for the pattern restricted to the set and "
        "renormalised."
    ),
    papers=(LONGFORMER, BIGBIRD_PAPER),
    command="attnlens sparse",
    tables=(
        TableDoc("sparse_heads", "Per head: smallest window keeping the coverage level (on the "
                 "window grid, exact, with global tokens), mass and error at that window.",
                 pivot=("measure", "value")),
        TableDoc("sparse_coverage", "Mass and output error per head, pattern and window.",
                 keys=("window",)),
        TableDoc("sparse_window_curve", "Mass inside ±w for every w, per head.",
                 keys=("window",)),
    ),
    figures=(
        FigureDoc("sparse_window90", "Smallest window ±w keeping 90 % of each head's mass."),
        FigureDoc("sparse_window90_global", "The same with the global tokens added."),
        FigureDoc("sparse_window_curves", "Mass inside ±w against w, one line per head."),
    ),
    card=(CardItem("sparse_heads", "Sparse coverage", kind="measures"),),
)

LINEAR = SectionDoc(
    about=(
        "A head without its softmax is a fast-weight memory storing v_j k_j^T, read exactly "
        "only when keys are orthogonal. interference = mean |cos| between distinct keys; "
        "effective_keys = participation ratio of the keys' Gram eigenvalues (at most "
        "min(n, d_head)); linear_error = relative output error of elu(x)+1 linear attention, "
        "raw_error of the unnormalised (Q K^T) V."
    ),
    papers=(SCHLAG, KATHAROPOULOS),
    command="attnlens linear",
    tables=(
        TableDoc("linear_attention", "Per head, means over sentences.",
                 pivot=("measure", "value")),
        TableDoc("linear_keys_by_length", "Effective orthogonal keys by sentence length."),
    ),
    figures=(
        FigureDoc("linear_error", "Relative output error of elu+1 linear attention."),
        FigureDoc("linear_interference", "Key interference (mean |cos| of distinct keys)."),
        FigureDoc("linear_keys_by_length", "Effective orthogonal keys against length."),
    ),
    card=(CardItem("linear_attention", "Linear attention", kind="measures"),),
)
