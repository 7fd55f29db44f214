"""The numbers the SubZero paper (ICDE 2013, section VIII) reports, to print beside ours.

Only what the text states is here (the figures' bars are not in the text).  Each entry
says what the number is and where the paper states it.
"""

from __future__ import annotations

__all__ = ["ASTRONOMY", "GENOMICS", "MICRO"]

ASTRONOMY = {
    "input": "two 512x2000 images (8 MB)",
    "disk_vs_input": {"FullOne": 66.0, "FullMany": 53.0, "SubZero": 1.95},
    "runtime_vs_base": {"FullOne": 6.0, "FullMany": 44.0, "SubZero": 1.49},
    "arrays_vs_input": 11.5,
    "backward_speedup_vs_blackbox": {"FullMany": 34.0, "FullOne": 45.0, "SubZero": 255.0},
    "entire_array_speedup": 83.0,
    "blackbox_query_seconds_max": 100.0,
    "source": "VIII-A and Fig. 5: FullOne/FullMany need 66x/53x storage and 6x/44x runtime; SubZero "
              "1.49x runtime, 1.95x disk; arrays 11.5x the input; backward queries 34x (FullMany), "
              "45x (FullOne), 255x (SubZero) faster than BlackBox on average; FQ0Slow 83x slower "
              "than FQ0; BlackBox up to 100 s per query",
}

GENOMICS = {
    "scale": 100,
    "disk_vs_input": {"PayBoth": 8.0, "FullBoth": 18.5},
    "runtime_vs_base": {"PayBoth": 2.8, "FullBoth": 26.0},
    "mismatched_backward_slowdown": {"FullForw": 520.0},
    "dynamic_speedup": {"backward": 2.0, "forward": 25.0},
    "unbounded_speedup": {"backward": "2-3", "forward": 500.0},
    "sweep_mb": [1, 5, 10, 20, 50, 100],
    "sweep_first_useful_mb": 20,
    "source": "VIII-B and Figs. 6-7: PayBoth/FullBoth need 8x/18.5x the input and 2.8x/26x runtime; "
              "FullForw slows backward queries 520x; with the query-time optimizer queries are as fast "
              "as or faster than BlackBox, up to 2x (backward) and 25x (forward); the optimizer picks "
              "BlackBox under small budgets, useful lineage from 20 MB, and improves forward queries "
              "over 500x and backward 2-3x when unbounded",
}

MICRO = {
    "input_mb": 3.8,
    "fullone_better_below_fanout": 5,
    "many_high_fanout_mb_max": 3.0,
    "many_high_fanout_seconds_max": 1.0,
    "blackbox_query_seconds": {"fanin=1": "2-20", "fanin=100": 0.7},
    "source": "VIII-C and Figs. 8-9: FullOne beats FullMany when fanout <= 5; at fanout 50-100 PayMany "
              "and FullMany need under 3 MB and 1 s; payload overhead is independent of fanin; "
              "forward FullOne needs up to fanin x more entries; BlackBox queries take 2-20 s at "
              "fanin 1 and about 0.7 s at fanin 100; Many strategies query slower than One ones "
              "(spatial index)",
}
