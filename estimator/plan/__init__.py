"""Layer 6, ``plan``: which layouts fit, and what to change when one does not.

- :mod:`.search`: the layout search (:func:`~.search.search`, ``min_gpus``, ``max_micro_batch``, ``max_seq_length``)
  over :mod:`.space` (the enumeration of valid TP/PP/split/VPP/CP/EP/ETP/recompute/micro-batch layouts, with
  pruning; its inputs read by :mod:`.options`) ranked by :mod:`.cost` (relative step time, and why a layout ranks
  where it does); :mod:`.explain` says where the configuration's own layout stands and why nothing is listed;
- :mod:`.suggest`: the cheapest changes that make a configuration fit ("Make it fit", ``--suggest``), each tried by
  :mod:`.candidates` (memoised estimates of the changed configurations, pruning, bisection);
- :mod:`.advice`: the valid values of the quick controls and the nearest valid ones; :mod:`.sweep`: memory against
  sequence length, micro-batch size and GPU count; :mod:`.verdicts`: the fit verdict in words;
- :mod:`.headroom`: how much MoE routing imbalance a layout can take (the largest overload factor that fits).

Imports: ``config``, ``model``, ``memory``, ``formats``. Imported by ``web`` and ``cli``. A new search option goes in
:mod:`.space` (and its flag in :mod:`estimator.cli.search`).
"""
