//! The group configs a share partition obeys (Kafka's `share.*` group configs), validated.
//!
//! One [`ShareConfig`] per share group; every [`super::SharePartition`] of the group holds a
//! copy, replaced with [`super::SharePartition::set_config`] when the group's configs change.
//! A change applies to transitions made afterwards (a lock already armed keeps its deadline).

use std::fmt;

use crate::constants::{
    SHARE_DELIVERY_COUNT_LIMIT_DEFAULT, SHARE_DELIVERY_COUNT_LIMIT_MAX,
    SHARE_DELIVERY_COUNT_LIMIT_MIN, SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT,
    SHARE_PARTITION_MAX_RECORD_LOCKS_MAX, SHARE_RECORD_LOCK_DURATION_MS_DEFAULT,
    SHARE_RECORD_LOCK_DURATION_MS_MAX, SHARE_RECORD_LOCK_DURATION_MS_MIN,
};

/// `share.record.lock.duration.ms`, `share.delivery.count.limit`,
/// `share.partition.max.record.locks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareConfig {
    /// How long an acquisition lock lasts before the record returns to AVAILABLE.
    pub record_lock_duration_ms: u64,
    /// A record whose delivery count reached this is ARCHIVED instead of made AVAILABLE again.
    pub delivery_count_limit: u16,
    /// Cap on in-flight records, SPEO - SPSO + 1: no new offsets are acquired beyond it.
    pub partition_max_record_locks: u32,
}

impl Default for ShareConfig {
    fn default() -> ShareConfig {
        ShareConfig {
            record_lock_duration_ms: SHARE_RECORD_LOCK_DURATION_MS_DEFAULT,
            delivery_count_limit: SHARE_DELIVERY_COUNT_LIMIT_DEFAULT,
            partition_max_record_locks: SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT,
        }
    }
}

/// A config value outside its allowed range (Kafka answers INVALID_CONFIG, 40).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidShareConfig {
    pub name: &'static str,
    pub value: u64,
    pub min: u64,
    pub max: u64,
}

impl fmt::Display for InvalidShareConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {} is outside [{}, {}]",
            self.name, self.value, self.min, self.max
        )
    }
}

impl std::error::Error for InvalidShareConfig {}

impl ShareConfig {
    /// Checks every value against its range (`constants.rs`).
    pub fn validate(&self) -> Result<(), InvalidShareConfig> {
        check(
            "share.record.lock.duration.ms",
            self.record_lock_duration_ms,
            SHARE_RECORD_LOCK_DURATION_MS_MIN,
            SHARE_RECORD_LOCK_DURATION_MS_MAX,
        )?;
        check(
            "share.delivery.count.limit",
            u64::from(self.delivery_count_limit),
            u64::from(SHARE_DELIVERY_COUNT_LIMIT_MIN),
            u64::from(SHARE_DELIVERY_COUNT_LIMIT_MAX),
        )?;
        check(
            "share.partition.max.record.locks",
            u64::from(self.partition_max_record_locks),
            1,
            u64::from(SHARE_PARTITION_MAX_RECORD_LOCKS_MAX),
        )
    }
}

fn check(name: &'static str, value: u64, min: u64, max: u64) -> Result<(), InvalidShareConfig> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(InvalidShareConfig {
            name,
            value,
            min,
            max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_valid() {
        let c = ShareConfig::default();
        assert_eq!(c.record_lock_duration_ms, 30_000);
        assert_eq!(c.delivery_count_limit, 5);
        assert_eq!(c.partition_max_record_locks, 2_000);
        c.validate().unwrap();
    }

    #[test]
    fn out_of_range_values_are_named() {
        let c = ShareConfig {
            delivery_count_limit: 1,
            ..ShareConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().name, "share.delivery.count.limit");
        let c = ShareConfig {
            record_lock_duration_ms: 999,
            ..ShareConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err().name,
            "share.record.lock.duration.ms"
        );
        let c = ShareConfig {
            partition_max_record_locks: 0,
            ..ShareConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err().name,
            "share.partition.max.record.locks"
        );
        let c = ShareConfig {
            partition_max_record_locks: SHARE_PARTITION_MAX_RECORD_LOCKS_MAX + 1,
            ..ShareConfig::default()
        };
        assert!(c.validate().is_err());
    }
}
