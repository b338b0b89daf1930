"""Golden paper values: every number of every table, typed again from the papers' own tables.

This list is independent of config/tables/*.yaml (it was typed from the papers' own texts,
not copied from the YAML), so a slip in either one shows up here. A table added to config/tables
must add its values here too, or test_every_table_has_golden_values fails.

Each entry: (table id, row label, paper value, where in the paper).
"""

import pytest

from resrepro.experiments import load_tables

pytestmark = pytest.mark.config  # checks config/tables itself

SAS = "SAS (CoNLL 2019)"
RSKIP = "Liu et al. (COLING 2020)"
ITER = "Jastrzebski et al. (ICLR 2018)"
NOISE = "Identity Connections in Residual Nets Improve Noise Stability"

GOLDEN = [
    # --- paper 001, Table 1: CIFAR-10, PreAct-ResNet-110, error %
    ("rskip-t1", "Baseline (He et al. 2016b)", 6.37, f"{RSKIP}, Table 1, row Baseline"),
    ("rskip-t1", "1xSkip", 6.31, f"{RSKIP}, Table 1, row 1xSkip"),
    ("rskip-t1", "2xSkip", 8.41, f"{RSKIP}, Table 1, row 2xSkip"),
    ("rskip-t1", "3xSkip", 9.23, f"{RSKIP}, Table 1, row 3xSkip"),
    ("rskip-t1", "1xSkip+LN", 7.72, f"{RSKIP}, Table 1, row 1xSkip+LN"),
    ("rskip-t1", "2xSkip+LN", 6.29, f"{RSKIP}, Table 1, row 2xSkip+LN"),
    ("rskip-t1", "3xSkip+LN", 6.07, f"{RSKIP}, Table 1, row 3xSkip+LN"),
    ("rskip-t1", "1rSkip+LN", 7.72, f"{RSKIP}, Table 1, row 1rSkip+LN"),
    ("rskip-t1", "2rSkip+LN", 6.02, f"{RSKIP}, Table 1, row 2rSkip+LN (bold)"),
    ("rskip-t1", "3rSkip+LN", 6.55, f"{RSKIP}, Table 1, row 3rSkip+LN"),
    # --- paper 001, Table 3: contracted skips, CIFAR-10, error %
    ("rskip-lam", "1xSkip", 6.31, f"{RSKIP}, Table 1, row 1xSkip"),
    ("rskip-lam", "2rSkip+LN", 6.02, f"{RSKIP}, Table 1, row 2rSkip+LN"),
    ("rskip-lam", "wSkip+LN, w initialised at 1", 8.66, f"{RSKIP}, Sec. 4.3 Learning lambda: 'The averaged error rate over 5 runs is 8.66'"),
    ("rskip-lam", "wSkip+LN, w initialised at 2", 6.45, f"{RSKIP}, Sec. 4.3 Learning lambda: 'We observe a performance of 6.45'"),
    ("rskip-t3", "x + F", 6.31, f"{RSKIP}, Table 3, row x + F"),
    ("rskip-t3", "0.5x + F", 18.61, f"{RSKIP}, Table 3, row 0.5x + F"),
    ("rskip-t3", "LN(0.5x + F)", 29.88, f"{RSKIP}, Table 3, row LN(0.5x + F)"),
    ("rskip-t3", "LN(x + 2F)", 24.98, f"{RSKIP}, Table 3, row LN(x + 2*F)"),
    ("rskip-t3", "LN(x + 3F)", 61.02, f"{RSKIP}, Table 3, row LN(x + 3*F)"),
    # --- paper 001, Table 4: BN, CIFAR-10, error %
    ("rskip-t4", "1xSkip", 6.31, f"{RSKIP}, Table 4, row 1xSkip"),
    ("rskip-t4", "1xSkip+BN", 8.23, f"{RSKIP}, Table 4, row 1xSkip+BN"),
    ("rskip-t4", "2xSkip+BN", 6.43, f"{RSKIP}, Table 4, row 2xSkip+BN"),
    ("rskip-t4", "3xSkip+BN", 6.50, f"{RSKIP}, Table 4, row 3xSkip+BN"),
    ("rskip-t4", "1rSkip+BN", 8.23, f"{RSKIP}, Table 4, row 1rSkip+BN"),
    ("rskip-t4", "2rSkip+BN", 6.77, f"{RSKIP}, Table 4, row 2rSkip+BN"),
    ("rskip-t4", "3rSkip+BN", 6.68, f"{RSKIP}, Table 4, row 3rSkip+BN"),
    ("rskip-t4", "1xSkip+LN", 7.72, f"{RSKIP}, Table 1, row 1xSkip+LN (beside Table 4, as Sec. 4.3 compares them)"),
    ("rskip-t4", "2xSkip+LN", 6.29, f"{RSKIP}, Table 1, row 2xSkip+LN (beside Table 4, as Sec. 4.3 compares them)"),
    ("rskip-t4", "3xSkip+LN", 6.07, f"{RSKIP}, Table 1, row 3xSkip+LN (beside Table 4, as Sec. 4.3 compares them)"),
    ("rskip-t4", "2rSkip+LN", 6.02, f"{RSKIP}, Table 1, row 2rSkip+LN (beside Table 4, as Sec. 4.3 compares them)"),
    ("rskip-t4", "3rSkip+LN", 6.55, f"{RSKIP}, Table 1, row 3rSkip+LN (beside Table 4, as Sec. 4.3 compares them)"),
    # --- paper 001, Table 6: CIFAR-100 error %, Baseline / + proposal per depth
    ("rskip-t6", "ResNet-20 Baseline", 33.38, f"{RSKIP}, Table 6, Baseline x ResNet-20"),
    ("rskip-t6", "ResNet-20 + 2rSkip+LN", 32.99, f"{RSKIP}, Table 6, + proposal x ResNet-20"),
    ("rskip-t6", "ResNet-32 Baseline", 32.00, f"{RSKIP}, Table 6, Baseline x ResNet-32"),
    ("rskip-t6", "ResNet-32 + 2rSkip+LN", 31.39, f"{RSKIP}, Table 6, + proposal x ResNet-32"),
    ("rskip-t6", "ResNet-44 Baseline", 30.50, f"{RSKIP}, Table 6, Baseline x ResNet-44"),
    ("rskip-t6", "ResNet-44 + 2rSkip+LN", 29.85, f"{RSKIP}, Table 6, + proposal x ResNet-44"),
    ("rskip-t6", "ResNet-56 Baseline", 29.81, f"{RSKIP}, Table 6, Baseline x ResNet-56"),
    ("rskip-t6", "ResNet-56 + 2rSkip+LN", 28.98, f"{RSKIP}, Table 6, + proposal x ResNet-56"),
    ("rskip-t6", "ResNet-110 Baseline", 28.71, f"{RSKIP}, Table 6, Baseline x ResNet-110"),
    ("rskip-t6", "ResNet-110 + 2rSkip+LN", 27.69, f"{RSKIP}, Table 6, + proposal x ResNet-110"),
    # --- paper 001, Table 2: EN-VI, Transformer base, BLEU
    ("rskip-t2", "Baseline", 30.31, f"{RSKIP}, Table 2, row Baseline"),
    ("rskip-t2", "1xSkip", 28.98, f"{RSKIP}, Table 2, row 1xSkip"),
    ("rskip-t2", "1xSkip+LN", 30.31, f"{RSKIP}, Table 2, row 1xSkip+LN"),
    ("rskip-t2", "2xSkip+LN", 30.99, f"{RSKIP}, Table 2, row 2xSkip+LN"),
    ("rskip-t2", "3xSkip+LN", 30.92, f"{RSKIP}, Table 2, row 3xSkip+LN"),
    ("rskip-t2", "1rSkip+LN", 30.31, f"{RSKIP}, Table 2, row 1rSkip+LN"),
    ("rskip-t2", "2rSkip+LN", 31.45, f"{RSKIP}, Table 2, row 2rSkip+LN (bold)"),
    ("rskip-t2", "3rSkip+LN", 31.10, f"{RSKIP}, Table 2, row 3rSkip+LN"),
    # --- paper 001, Table 5: fewer blocks, EN-VI, BLEU
    ("rskip-t5", "1xSkip+LN, 6 blocks", 30.31, f"{RSKIP}, Table 5, 1xSkip+LN x 6 blocks"),
    ("rskip-t5", "2rSkip+LN, 6 blocks", 31.45, f"{RSKIP}, Table 5, 2rSkip+LN x 6 blocks"),
    ("rskip-t5", "1xSkip+LN, 2 blocks", 30.04, f"{RSKIP}, Table 5, 1xSkip+LN x 2 blocks"),
    ("rskip-t5", "2rSkip+LN, 2 blocks", 30.49, f"{RSKIP}, Table 5, 2rSkip+LN x 2 blocks"),
    # --- paper 001, Table 7: Transformer-Base/Big and + proposal, BLEU per language pair
    ("rskip-t7", "EN-VI Base", 30.3, f"{RSKIP}, Table 7, Transformer-Base x EN-VI"),
    ("rskip-t7", "EN-VI Base + proposal", 31.5, f"{RSKIP}, Table 7, + proposal (Base) x EN-VI"),
    ("rskip-t7", "EN-VI Big", 31.4, f"{RSKIP}, Table 7, Transformer-Big x EN-VI"),
    ("rskip-t7", "EN-VI Big + proposal", 32.2, f"{RSKIP}, Table 7, + proposal (Big) x EN-VI"),
    ("rskip-t7", "EN-DE Base", 27.9, f"{RSKIP}, Table 7, Transformer-Base x EN-DE"),
    ("rskip-t7", "EN-DE Base + proposal", 28.6, f"{RSKIP}, Table 7, + proposal (Base) x EN-DE"),
    ("rskip-t7", "EN-DE Big", 28.5, f"{RSKIP}, Table 7, Transformer-Big x EN-DE"),
    ("rskip-t7", "EN-DE Big + proposal", 29.0, f"{RSKIP}, Table 7, + proposal (Big) x EN-DE"),
    ("rskip-t7", "EN-FR Base", 38.2, f"{RSKIP}, Table 7, Transformer-Base x EN-FR"),
    ("rskip-t7", "EN-FR Base + proposal", 39.0, f"{RSKIP}, Table 7, + proposal (Base) x EN-FR"),
    ("rskip-t7", "EN-FR Big", 41.0, f"{RSKIP}, Table 7, Transformer-Big x EN-FR"),
    ("rskip-t7", "EN-FR Big + proposal", 41.6, f"{RSKIP}, Table 7, + proposal (Big) x EN-FR"),
    # --- paper 000, Table 4: CIFAR accuracy %, PreAct-ResNet-110
    ("sas-t4", "CIFAR-10 Baseline", 93.66, f"{SAS}, Table 4, CIFAR-10 x Baseline"),
    ("sas-t4", "CIFAR-10 + Proposal", 94.05, f"{SAS}, Table 4, CIFAR-10 x + Proposal"),
    ("sas-t4", "CIFAR-100 Baseline", 71.29, f"{SAS}, Table 4, CIFAR-100 x Baseline"),
    ("sas-t4", "CIFAR-100 + Proposal", 72.91, f"{SAS}, Table 4, CIFAR-100 x + Proposal"),
    # --- paper 000, Table 6: gates, CIFAR-10 accuracy %
    ("sas-t6", "Baseline (PreAct-ResNet-110)", 93.66, f"{SAS}, Table 6, row Baseline"),
    ("sas-t6", "+ Transform Gate", 92.15, f"{SAS}, Table 6, row + Transform Gate"),
    ("sas-t6", "+ Scaling Gate (Single Layer)", 92.73, f"{SAS}, Table 6, row + Scaling Gate (Single Layer)"),
    ("sas-t6", "+ Scaling Gate (Full Model)", 93.82, f"{SAS}, Table 6, row + Scaling Gate (Full Model)"),
    # --- paper 000, Table 7: BN vs LN, CIFAR-10 accuracy %
    ("sas-t7", "x + F (Baseline)", 93.66, f"{SAS}, Table 7, row x + F (Baseline)"),
    ("sas-t7", "SAS with BN", 93.23, f"{SAS}, Table 7, row ... BN(x + F)"),
    ("sas-t7", "SAS with LN", 94.05, f"{SAS}, Table 7, row ... LN(x + F)"),
    # --- paper 000, Sec. 3.2 footnote 1: "94.05 accuracy vs. 93.95 accuracy in CIFAR-10"
    ("sas-fn1", "free gamma", 93.95, f"{SAS}, footnote 1, gamma"),
    ("sas-fn1", "tied gamma = (1-a)(1-b)", 94.05, f"{SAS}, footnote 1, (1-a)(1-b)"),
    # --- paper 000, Table 3: BLEU, Transformer-Base then -Big, EN-VI / EN-DE / EN-FR
    ("sas-t3", "EN-VI Base", 30.9, f"{SAS}, Table 3, Base Baseline x EN-VI"),
    ("sas-t3", "EN-VI Base + Proposal", 32.0, f"{SAS}, Table 3, Base + Proposal x EN-VI"),
    ("sas-t3", "EN-DE Base", 27.5, f"{SAS}, Table 3, Base Baseline x EN-DE"),
    ("sas-t3", "EN-DE Base + Proposal", 27.6, f"{SAS}, Table 3, Base + Proposal x EN-DE"),
    ("sas-t3", "EN-FR Base", 38.2, f"{SAS}, Table 3, Base Baseline x EN-FR"),
    ("sas-t3", "EN-FR Base + Proposal", 38.4, f"{SAS}, Table 3, Base + Proposal x EN-FR"),
    ("sas-t3", "EN-VI Big", 31.6, f"{SAS}, Table 3, Big Baseline x EN-VI"),
    ("sas-t3", "EN-VI Big + Proposal", 32.2, f"{SAS}, Table 3, Big + Proposal x EN-VI"),
    ("sas-t3", "EN-DE Big", 28.5, f"{SAS}, Table 3, Big Baseline x EN-DE"),
    ("sas-t3", "EN-DE Big + Proposal", 28.7, f"{SAS}, Table 3, Big + Proposal x EN-DE"),
    ("sas-t3", "EN-FR Big", 41.0, f"{SAS}, Table 3, Big Baseline x EN-FR"),
    ("sas-t3", "EN-FR Big + Proposal", 41.3, f"{SAS}, Table 3, Big + Proposal x EN-FR"),
    # --- paper 000, Table 5: MSCOCO Karpathy test, Transformer Baseline / + Proposal, one row per metric
    ("sas-t5", "Baseline, BLEU-1", 80.2, f"{SAS}, Table 5, Baseline x BLEU-1"),
    ("sas-t5", "+ Proposal, BLEU-1", 81.2, f"{SAS}, Table 5, + Proposal x BLEU-1"),
    ("sas-t5", "Baseline, BLEU-2", 64.9, f"{SAS}, Table 5, Baseline x BLEU-2"),
    ("sas-t5", "+ Proposal, BLEU-2", 65.4, f"{SAS}, Table 5, + Proposal x BLEU-2"),
    ("sas-t5", "Baseline, BLEU-3", 50.7, f"{SAS}, Table 5, Baseline x BLEU-3"),
    ("sas-t5", "+ Proposal, BLEU-3", 51.2, f"{SAS}, Table 5, + Proposal x BLEU-3"),
    ("sas-t5", "Baseline, BLEU-4", 39.0, f"{SAS}, Table 5, Baseline x BLEU-4"),
    ("sas-t5", "+ Proposal, BLEU-4", 39.3, f"{SAS}, Table 5, + Proposal x BLEU-4"),
    ("sas-t5", "Baseline, METEOR", 28.4, f"{SAS}, Table 5, Baseline x METEOR"),
    ("sas-t5", "+ Proposal, METEOR", 28.7, f"{SAS}, Table 5, + Proposal x METEOR"),
    ("sas-t5", "Baseline, ROUGE-L", 58.6, f"{SAS}, Table 5, Baseline x ROUGE-L"),
    ("sas-t5", "+ Proposal, ROUGE-L", 59.0, f"{SAS}, Table 5, + Proposal x ROUGE-L"),
    ("sas-t5", "Baseline, CIDEr", 126.3, f"{SAS}, Table 5, Baseline x CIDEr"),
    ("sas-t5", "+ Proposal, CIDEr", 129.8, f"{SAS}, Table 5, + Proposal x CIDEr"),
    ("sas-t5", "Baseline, SPICE", 21.7, f"{SAS}, Table 5, Baseline x SPICE"),
    ("sas-t5", "+ Proposal, SPICE", 22.6, f"{SAS}, Table 5, + Proposal x SPICE"),
    # --- paper 003, Table 1: test error % (train / test printed; the test half here)
    ("iter-t1", "ResNet-32, CIFAR-10", 7.14, f"{ITER}, Table 1, ResNet-32 x CIFAR10 (test half)"),
    ("iter-t1", "ResNet-38, CIFAR-10", 6.99, f"{ITER}, Table 1, ResNet-38 x CIFAR10 (test half)"),
    ("iter-t1", "ResNet-110-UBN, CIFAR-10", 6.62, f"{ITER}, Table 1, ResNet-110-UBN x CIFAR10 (test half)"),
    ("iter-t1", "ResNet-146-UBN, CIFAR-10", 6.82, f"{ITER}, Table 1, ResNet-146-UBN x CIFAR10 (test half)"),
    ("iter-t1", "ResNet-182-UBN, CIFAR-10", 6.97, f"{ITER}, Table 1, ResNet-182-UBN x CIFAR10 (test half)"),
    ("iter-t1", "ResNet-56, CIFAR-10", 6.53, f"{ITER}, Table 1, ResNet-56 x CIFAR10 (test half)"),
    ("iter-t1", "ResNet-110, CIFAR-10", 6.13, f"{ITER}, Table 1, ResNet-110 x CIFAR10 (test half)"),
    ("iter-t1", "ResNet-32, CIFAR-100", 30.08, f"{ITER}, Table 1, ResNet-32 x CIFAR100 (test half)"),
    ("iter-t1", "ResNet-38, CIFAR-100", 29.66, f"{ITER}, Table 1, ResNet-38 x CIFAR100 (test half)"),
    ("iter-t1", "ResNet-110-UBN, CIFAR-100", 29.94, f"{ITER}, Table 1, ResNet-110-UBN x CIFAR100 (test half)"),
    ("iter-t1", "ResNet-146-UBN, CIFAR-100", 29.49, f"{ITER}, Table 1, ResNet-146-UBN x CIFAR100 (test half)"),
    ("iter-t1", "ResNet-182-UBN, CIFAR-100", 29.33, f"{ITER}, Table 1, ResNet-182-UBN x CIFAR100 (test half)"),
    ("iter-t1", "ResNet-56, CIFAR-100", 28.99, f"{ITER}, Table 1, ResNet-56 x CIFAR100 (test half)"),
    ("iter-t1", "ResNet-110, CIFAR-100", 27.54, f"{ITER}, Table 1, ResNet-110 x CIFAR100 (test half)"),
    # paper 002, SM Tables 1 and 2: L as printed, E printed as a fraction and held as a percentage
    ("noise-t1", "PlnNet-20, risk", 0.07227, f"{NOISE}, SM Table 1, PlnNet-20 L"),
    ("noise-t1", "ResNet-20, risk", 0.04287, f"{NOISE}, SM Table 1, ResNet-20 L"),
    ("noise-t1", "PlnNet-32, risk", 0.1225, f"{NOISE}, SM Table 1, PlnNet-32 L"),
    ("noise-t1", "ResNet-32, risk", 0.04847, f"{NOISE}, SM Table 1, ResNet-32 L"),
    ("noise-t1", "PlnNet-44, risk", 0.495, f"{NOISE}, SM Table 1, PlnNet-44 L"),
    ("noise-t1", "ResNet-44, risk", 0.07397, f"{NOISE}, SM Table 1, ResNet-44 L"),
    ("noise-t1", "PlnNet-20, error", 12.63, f"{NOISE}, SM Table 1, PlnNet-20 E 0.1263"),
    ("noise-t1", "ResNet-20, error", 11.31, f"{NOISE}, SM Table 1, ResNet-20 E 0.1131"),
    ("noise-t1", "PlnNet-32, error", 13.49, f"{NOISE}, SM Table 1, PlnNet-32 E 0.1349"),
    ("noise-t1", "ResNet-32, error", 11.43, f"{NOISE}, SM Table 1, ResNet-32 E 0.1143"),
    ("noise-t1", "PlnNet-44, error", 22.13, f"{NOISE}, SM Table 1, PlnNet-44 E 0.2213"),
    ("noise-t1", "ResNet-44, error", 11.82, f"{NOISE}, SM Table 1, ResNet-44 E 0.1182"),
    # paper 002, SM A, the text under Table 1: "6.85 (0.4950/0.07227)", "1.73 (0.07397/0.04287)"
    ("noise-t1b", "PlnNet-20, risk", 0.07227, f"{NOISE}, SM A, the text under Table 1, PlnNet-20 L"),
    ("noise-t1b", "PlnNet-44, risk", 0.495, f"{NOISE}, SM A, the text under Table 1, PlnNet-44 L"),
    ("noise-t1b", "ResNet-20, risk", 0.04287, f"{NOISE}, SM A, the text under Table 1, ResNet-20 L"),
    ("noise-t1b", "ResNet-44, risk", 0.07397, f"{NOISE}, SM A, the text under Table 1, ResNet-44 L"),
    ("noise-t2", "ResNet-20, risk", 0.04287, f"{NOISE}, SM Table 2, ResNet-20 L"),
    ("noise-t2", "PlnNet-20 (equivalent), risk", 0.04132, f"{NOISE}, SM Table 2, PlnNet-20 L"),
    ("noise-t2", "ResNet-32, risk", 0.04847, f"{NOISE}, SM Table 2, ResNet-32 L"),
    ("noise-t2", "PlnNet-32 (equivalent), risk", 0.0488, f"{NOISE}, SM Table 2, PlnNet-32 L"),
    ("noise-t2", "ResNet-44, risk", 0.07397, f"{NOISE}, SM Table 2, ResNet-44 L"),
    ("noise-t2", "PlnNet-44 (equivalent), risk", 0.07345, f"{NOISE}, SM Table 2, PlnNet-44 L"),
    ("noise-t2", "ResNet-20, error", 11.31, f"{NOISE}, SM Table 2, ResNet-20 E 0.1131"),
    ("noise-t2", "PlnNet-20 (equivalent), error", 11.21, f"{NOISE}, SM Table 2, PlnNet-20 E 0.1121"),
    ("noise-t2", "ResNet-32, error", 11.43, f"{NOISE}, SM Table 2, ResNet-32 E 0.1143"),
    ("noise-t2", "PlnNet-32 (equivalent), error", 10.85, f"{NOISE}, SM Table 2, PlnNet-32 E 0.1085"),
    ("noise-t2", "ResNet-44, error", 11.82, f"{NOISE}, SM Table 2, ResNet-44 E 0.1182"),
    ("noise-t2", "PlnNet-44 (equivalent), error", 11.59, f"{NOISE}, SM Table 2, PlnNet-44 E 0.1159"),
    # paper 002, SM Table 3 (numbers lost in our copy; these five are its text's)
    ("noise-t3", "PlnNet-32 before: mass, ID entries", 67.0, f"{NOISE}, SM Table 3, its text: plain ID mass 'initially very small (67)'"),
    ("noise-t3", "PlnNet-32 after: mass, |w| > 0.25", 700.0, f"{NOISE}, SM Table 3, its text: '72/700'"),
    ("noise-t3", "PlnNet-32 after: mass, ID entries", 72.0, f"{NOISE}, SM Table 3, its text: 'increases to 72'"),
    ("noise-t3", "PlnNet-32 after: ID share (%)", 10.29, f"{NOISE}, SM Table 3, its text: 'a mere 10.29 percent (72/700)'"),
    ("noise-t3", "ResNet-32 transferred after: ID share (%)", 76.0, f"{NOISE}, SM Table 3, its text: 'more than 76 percent'"),
    # paper 002, SM Table 4: before and after training, loss then weight regularization
    ("noise-t4", "ResNet-20 before: risk", 2.305, f"{NOISE}, SM Table 4, before, 20, ResNet loss"),
    ("noise-t4", "PlnNet-20 before: risk", 2.309, f"{NOISE}, SM Table 4, before, 20, PlnNet loss"),
    ("noise-t4", "ResNet-20 before: decay term", float(f"{0.0005393 / 268:.5g}"), f"{NOISE}, SM Table 4, its text: the plain term 'around 268' times the residual one"),
    ("noise-t4", "PlnNet-20 before: decay term", 0.0005393, f"{NOISE}, SM Table 4, before, 20, PlnNet weight regularization"),
    ("noise-t4", "ResNet-32 before: risk", 2.305, f"{NOISE}, SM Table 4, before, 32, ResNet loss"),
    ("noise-t4", "PlnNet-32 before: risk", 2.308, f"{NOISE}, SM Table 4, before, 32, PlnNet loss"),
    ("noise-t4", "PlnNet-32 before: decay term", 0.0008878, f"{NOISE}, SM Table 4, before, 32, PlnNet weight regularization"),
    ("noise-t4", "ResNet-44 before: risk", 2.306, f"{NOISE}, SM Table 4, before, 44, ResNet loss"),
    ("noise-t4", "PlnNet-44 before: risk", 2.309, f"{NOISE}, SM Table 4, before, 44, PlnNet loss"),
    ("noise-t4", "PlnNet-44 before: decay term", 0.001238, f"{NOISE}, SM Table 4, before, 44, PlnNet weight regularization"),
    ("noise-t4", "ResNet-20 after: risk", 0.04132, f"{NOISE}, SM Table 4, after, 20, ResNet loss"),
    ("noise-t4", "PlnNet-20 after: risk", 0.07227, f"{NOISE}, SM Table 4, after, 20, PlnNet loss"),
    ("noise-t4", "ResNet-20 after: decay term", 0.0005122, f"{NOISE}, SM Table 4, after, 20, ResNet weight regularization"),
    ("noise-t4", "PlnNet-20 after: decay term", 0.0007743, f"{NOISE}, SM Table 4, after, 20, PlnNet weight regularization"),
    ("noise-t4", "ResNet-32 after: risk", 0.0488, f"{NOISE}, SM Table 4, after, 32, ResNet loss"),
    ("noise-t4", "PlnNet-32 after: risk", 0.1225, f"{NOISE}, SM Table 4, after, 32, PlnNet loss"),
    ("noise-t4", "ResNet-32 after: decay term", 0.0005561, f"{NOISE}, SM Table 4, after, 32, ResNet weight regularization"),
    ("noise-t4", "PlnNet-32 after: decay term", 0.0009458, f"{NOISE}, SM Table 4, after, 32, PlnNet weight regularization"),
    ("noise-t4", "ResNet-44 after: risk", 0.07345, f"{NOISE}, SM Table 4, after, 44, ResNet loss"),
    ("noise-t4", "PlnNet-44 after: risk", 0.495, f"{NOISE}, SM Table 4, after, 44, PlnNet loss"),
    ("noise-t4", "ResNet-44 after: decay term", 0.0006194, f"{NOISE}, SM Table 4, after, 44, ResNet weight regularization"),
    ("noise-t4", "PlnNet-44 after: decay term", 0.00118, f"{NOISE}, SM Table 4, after, 44, PlnNet weight regularization"),
    # paper 002, SM Table 5: L as printed, E printed as a fraction and held as an accuracy (%)
    ("noise-t5", "ResNet-20, risk", 0.04132, f"{NOISE}, SM Table 5, 20, residual L"),
    ("noise-t5", "Diagonal-20, risk", 0.9385, f"{NOISE}, SM Table 5, 20, diagonal L"),
    ("noise-t5", "ResNet-32, risk", 0.0488, f"{NOISE}, SM Table 5, 32, residual L"),
    ("noise-t5", "Diagonal-32, risk", 0.944, f"{NOISE}, SM Table 5, 32, diagonal L"),
    ("noise-t5", "ResNet-44, risk", 0.07345, f"{NOISE}, SM Table 5, 44, residual L"),
    ("noise-t5", "Diagonal-44, risk", 0.9397, f"{NOISE}, SM Table 5, 44, diagonal L"),
    ("noise-t5", "ResNet-20, accuracy", 88.79, f"{NOISE}, SM Table 5, 20, residual E 0.1121"),
    ("noise-t5", "Diagonal-20, accuracy", 68.48, f"{NOISE}, SM Table 5, 20, diagonal E 0.3152"),
    ("noise-t5", "ResNet-32, accuracy", 89.15, f"{NOISE}, SM Table 5, 32, residual E 0.1085"),
    ("noise-t5", "Diagonal-32, accuracy", 68.81, f"{NOISE}, SM Table 5, 32, diagonal E 0.3119"),
    ("noise-t5", "ResNet-44, accuracy", 88.41, f"{NOISE}, SM Table 5, 44, residual E 0.1159"),
    ("noise-t5", "Diagonal-44, accuracy", 68.17, f"{NOISE}, SM Table 5, 44, diagonal E 0.3183"),
]

# Model sizes the papers print beside a row (paper 001 Table 7's "#Params" column, for its EN-DE
# models): 65M and 213M, the proposal "+0.03M" and "+0.06M" over them.
GOLDEN_PARAMETERS = [
    ("rskip-t7", "EN-DE Base", 65_000_000, f"{RSKIP}, Table 7, Transformer-Base: 65M"),
    ("rskip-t7", "EN-DE Base + proposal", 65_030_000, f"{RSKIP}, Table 7, + proposal (Base): +0.03M"),
    ("rskip-t7", "EN-DE Big", 213_000_000, f"{RSKIP}, Table 7, Transformer-Big: 213M"),
    ("rskip-t7", "EN-DE Big + proposal", 213_060_000, f"{RSKIP}, Table 7, + proposal (Big): +0.06M"),
    # paper 003 Table 1's "Parameters" column: one range per model, its CIFAR-10 count then its
    # CIFAR-100 count (a 100-class head), e.g. "467k-473k"
    ("iter-t1", "ResNet-32, CIFAR-10", 467_000, f"{ITER}, Table 1, ResNet-32: 467k-473k"),
    ("iter-t1", "ResNet-38, CIFAR-10", 565_000, f"{ITER}, Table 1, ResNet-38: 565k-571k"),
    ("iter-t1", "ResNet-110-UBN, CIFAR-10", 570_000, f"{ITER}, Table 1, ResNet-110-UBN: 570k-576k"),
    ("iter-t1", "ResNet-146-UBN, CIFAR-10", 573_000, f"{ITER}, Table 1, ResNet-146-UBN: 573k-579k"),
    ("iter-t1", "ResNet-182-UBN, CIFAR-10", 576_000, f"{ITER}, Table 1, ResNet-182-UBN: 576k-581k"),
    ("iter-t1", "ResNet-56, CIFAR-10", 857_000, f"{ITER}, Table 1, ResNet-56: 857k-863k"),
    ("iter-t1", "ResNet-110, CIFAR-10", 1734_000, f"{ITER}, Table 1, ResNet-110: 1734k-1740k"),
    ("iter-t1", "ResNet-32, CIFAR-100", 473_000, f"{ITER}, Table 1, ResNet-32: 467k-473k"),
    ("iter-t1", "ResNet-38, CIFAR-100", 571_000, f"{ITER}, Table 1, ResNet-38: 565k-571k"),
    ("iter-t1", "ResNet-110-UBN, CIFAR-100", 576_000, f"{ITER}, Table 1, ResNet-110-UBN: 570k-576k"),
    ("iter-t1", "ResNet-146-UBN, CIFAR-100", 579_000, f"{ITER}, Table 1, ResNet-146-UBN: 573k-579k"),
    ("iter-t1", "ResNet-182-UBN, CIFAR-100", 581_000, f"{ITER}, Table 1, ResNet-182-UBN: 576k-581k"),
    ("iter-t1", "ResNet-56, CIFAR-100", 863_000, f"{ITER}, Table 1, ResNet-56: 857k-863k"),
    ("iter-t1", "ResNet-110, CIFAR-100", 1740_000, f"{ITER}, Table 1, ResNet-110: 1734k-1740k"),
]


# Paper 003 Table 1 prints "train / test" error per dataset; the train half:
GOLDEN_TRAIN_ERRORS = [
    ("iter-t1", "ResNet-32, CIFAR-10", 1.53, f"{ITER}, Table 1, ResNet-32 x CIFAR10 (train half)"),
    ("iter-t1", "ResNet-38, CIFAR-10", 1.2, f"{ITER}, Table 1, ResNet-38 x CIFAR10 (train half)"),
    ("iter-t1", "ResNet-110-UBN, CIFAR-10", 0.63, f"{ITER}, Table 1, ResNet-110-UBN x CIFAR10 (train half)"),
    ("iter-t1", "ResNet-146-UBN, CIFAR-10", 0.68, f"{ITER}, Table 1, ResNet-146-UBN x CIFAR10 (train half)"),
    ("iter-t1", "ResNet-182-UBN, CIFAR-10", 0.48, f"{ITER}, Table 1, ResNet-182-UBN x CIFAR10 (train half)"),
    ("iter-t1", "ResNet-56, CIFAR-10", 0.58, f"{ITER}, Table 1, ResNet-56 x CIFAR10 (train half)"),
    ("iter-t1", "ResNet-110, CIFAR-10", 0.22, f"{ITER}, Table 1, ResNet-110 x CIFAR10 (train half)"),
    ("iter-t1", "ResNet-32, CIFAR-100", 12.62, f"{ITER}, Table 1, ResNet-32 x CIFAR100 (train half)"),
    ("iter-t1", "ResNet-38, CIFAR-100", 10.04, f"{ITER}, Table 1, ResNet-38 x CIFAR100 (train half)"),
    ("iter-t1", "ResNet-110-UBN, CIFAR-100", 7.75, f"{ITER}, Table 1, ResNet-110-UBN x CIFAR100 (train half)"),
    ("iter-t1", "ResNet-146-UBN, CIFAR-100", 7.21, f"{ITER}, Table 1, ResNet-146-UBN x CIFAR100 (train half)"),
    ("iter-t1", "ResNet-182-UBN, CIFAR-100", 6.42, f"{ITER}, Table 1, ResNet-182-UBN x CIFAR100 (train half)"),
    ("iter-t1", "ResNet-56, CIFAR-100", 5.19, f"{ITER}, Table 1, ResNet-56 x CIFAR100 (train half)"),
    ("iter-t1", "ResNet-110, CIFAR-100", 1.26, f"{ITER}, Table 1, ResNet-110 x CIFAR100 (train half)"),
]

@pytest.fixture(scope="module")
def config_values():
    """Every paper value of config/tables; a row whose value our copy of the paper lost (null) has none."""
    return [(table_id, row["label"], row["paper"]) for table_id, table in load_tables("config/tables").items() for row in table["rows"]
            if row["paper"] is not None]


def test_golden_list_is_well_formed():
    keys = [(t, label) for t, label, _, _ in GOLDEN]
    assert len(keys) == len(set(keys)), "a (table, row) appears twice in GOLDEN"
    assert all(isinstance(v, float) and source for _, _, v, source in GOLDEN)


def test_every_table_has_golden_values(config_values):
    """A table in config/tables without golden values here (a table added later) fails."""
    assert {t for t, _, _ in config_values} == {t for t, _, _, _ in GOLDEN}


def test_config_tables_hold_exactly_the_papers_values(config_values):
    """Same rows, same order, same values (exact equality: these are typed decimals)."""
    golden = [(t, label, value) for t, label, value, _ in GOLDEN]
    by_table = lambda rows, t: [r for r in rows if r[0] == t]  # noqa: E731
    for table_id in dict.fromkeys(t for t, _, _ in golden):
        assert by_table(config_values, table_id) == by_table(golden, table_id), table_id
    assert len(config_values) == len(golden)  # 164 values in 18 tables (2026-11-26)


def test_sources_name_the_table_of_the_config_entry():
    """The golden source and config/tables' `source` cite the same table of the same paper."""
    tables = load_tables("config/tables")
    for table_id, _, _, source in GOLDEN:
        number = table_id.split("-")[1]
        cited = tables[table_id]["source"]
        if number.startswith("fn"):
            assert "footnote 1" in source and "footnote 1" in cited
        elif number == "t1b":  # paper 002's degradation ratios, in the text under its SM Table 1
            assert "the text under Table 1" in source and cited.endswith("(the text under Table 1)")
        elif number == "lam":  # paper 001's "Learning lambda" paragraph, with two of Table 1's rows
            assert "Learning lambda" in cited and ("Learning lambda" in source or "Table 1," in source)
        else:
            assert f"Table {number[1:]}," in source and cited.endswith(f"Table {number[1:]}")


def test_config_tables_hold_exactly_the_papers_parameter_counts():
    counts = [(t, row["label"], row["paper_parameters"]) for t, table in load_tables("config/tables").items()
              for row in table["rows"] if "paper_parameters" in row]
    assert sorted(counts) == sorted((t, label, n) for t, label, n, _ in GOLDEN_PARAMETERS)


def test_config_tables_hold_exactly_the_papers_train_errors():
    errors = [(t, row["label"], row["paper_train_error"]) for t, table in load_tables("config/tables").items()
              for row in table["rows"] if "paper_train_error" in row]
    assert errors == [(t, label, v) for t, label, v, _ in GOLDEN_TRAIN_ERRORS]


# Paper 000 Table 5's other rows: GLIED (its "-" for BLEU-2 and BLEU-3 as None) and the
# improvements it prints, which the Baseline and + Proposal values above must reproduce.
GOLDEN_REFERENCES = [("sas-t5", "GLIED (Liu et al., 2019c)", {"bleu1": 80.4, "bleu2": None, "bleu3": None, "bleu4": 39.6, "meteor": 28.9,
                                                              "rouge_l": 58.8, "cider": 129.3, "spice": 22.6})]
SAS_T5_IMPROVEMENTS = {"BLEU-1": 1.0, "BLEU-2": 0.5, "BLEU-3": 0.5, "BLEU-4": 0.3, "METEOR": 0.3, "ROUGE-L": 0.4, "CIDEr": 3.5, "SPICE": 0.9}


def test_config_tables_hold_exactly_the_papers_reference_rows():
    tables = load_tables("config/tables")
    held = [(t, ref["label"], ref["paper"]) for t, table in tables.items() for ref in table.get("references", [])]
    assert held == GOLDEN_REFERENCES


def test_sas_t5_values_give_the_improvements_the_paper_prints():
    golden = {label: value for table, label, value, _ in GOLDEN if table == "sas-t5"}
    for metric, gain in SAS_T5_IMPROVEMENTS.items():
        assert golden[f"+ Proposal, {metric}"] - golden[f"Baseline, {metric}"] == pytest.approx(gain, abs=1e-9), metric
