//! Newtypes shared across modules: offsets, topic-partitions, shard ids.
