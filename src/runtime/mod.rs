//! The only module that touches glommio: executors, the cross-shard mesh, the clock, files.
