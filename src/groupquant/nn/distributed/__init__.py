"""Distributed training helpers: the FSDP2 MX all-gather (``enable_mx_all_gather``,
``mx_all_gather.py``) and the sharded master weight it gathers as codes
(``mx_shard_weight.py``)."""
