"""The papers the report sections cite (each section's ``SectionDoc`` lists its own)."""

from __future__ import annotations

from attnlens.report.catalog import Paper

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
