//! Broker-wide connection limits, as Kafka's `ConnectionQuotas` applies them: a synchronous,
//! I/O-free count of open connections per broker, per listener and per client IP, and of
//! connections accepted in the last second. The runtime asks [`ConnectionLimits::try_open`]
//! for every accepted connection (all shards share one instance) and reports its close.
//!
//! Limits (configuration keys, Kafka's names):
//! - `max.connections` (broker-wide) and `listener.name.<l>.max.connections` (one listener);
//! - `max.connections.per.ip` and `max.connections.per.ip.overrides` (`IP:N,IP:N`), counted
//!   over every listener;
//! - `max.connection.creation.rate` (broker-wide, connections per second) and
//!   `listener.name.<l>.max.connection.creation.rate`.
//!
//! A connection over any limit is closed at once. (Kafka closes a connection over the per-IP
//! limit the same way, but *delays* accepting while the broker or listener is at
//! `max.connections` or over its creation rate; here those are closed too.)
//!
//! | check (in order)          | over the limit →          |
//! |---------------------------|---------------------------|
//! | per-IP count              | `Refusal::PerIp`          |
//! | listener count, broker count | `Refusal::Listener` / `Refusal::Broker` |
//! | listener rate, broker rate   | `Refusal::ListenerRate` / `Refusal::BrokerRate` |
//! | none                      | counted; `Ok`             |

use crate::constants::CONNECTION_RATE_WINDOW_MS;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;

/// The configured limits (`None` / absent: unlimited, Kafka's `Int.MaxValue` default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitsConfig {
    pub max_connections: Option<usize>,
    /// Listener name (upper case) → its own `max.connections`.
    pub listener_max_connections: BTreeMap<String, usize>,
    pub max_connections_per_ip: Option<usize>,
    pub per_ip_overrides: BTreeMap<IpAddr, usize>,
    /// Connections per second.
    pub max_creation_rate: Option<usize>,
    pub listener_max_creation_rate: BTreeMap<String, usize>,
}

impl LimitsConfig {
    pub fn is_unlimited(&self) -> bool {
        *self == LimitsConfig::default()
    }

    fn per_ip_max(&self, ip: IpAddr) -> Option<usize> {
        self.per_ip_overrides
            .get(&ip)
            .copied()
            .or(self.max_connections_per_ip)
    }
}

/// Why a connection was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    PerIp { ip: IpAddr, max: usize },
    Listener { listener: String, max: usize },
    Broker { max: usize },
    ListenerRate { listener: String, per_second: usize },
    BrokerRate { per_second: usize },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::PerIp { ip, max } => write!(f, "{ip} has {max} connections (max.connections.per.ip)"),
            Refusal::Listener { listener, max } => {
                write!(f, "listener {listener} has {max} connections (max.connections)")
            }
            Refusal::Broker { max } => write!(f, "the broker has {max} connections (max.connections)"),
            Refusal::ListenerRate { listener, per_second } => write!(
                f,
                "listener {listener} accepted {per_second} connections in the last second (max.connection.creation.rate)"
            ),
            Refusal::BrokerRate { per_second } => write!(
                f,
                "the broker accepted {per_second} connections in the last second (max.connection.creation.rate)"
            ),
        }
    }
}

/// Accept times within the rate window.
#[derive(Debug, Default)]
struct RateWindow {
    accepted_ms: VecDeque<u64>,
}

impl RateWindow {
    fn count(&mut self, now_ms: u64) -> usize {
        while self
            .accepted_ms
            .front()
            .is_some_and(|&t| t + CONNECTION_RATE_WINDOW_MS <= now_ms)
        {
            self.accepted_ms.pop_front();
        }
        self.accepted_ms.len()
    }
}

/// Open connections and recent accepts of the whole broker.
#[derive(Debug)]
pub struct ConnectionLimits {
    config: LimitsConfig,
    total: usize,
    per_listener: HashMap<String, usize>,
    per_ip: HashMap<IpAddr, usize>,
    broker_rate: RateWindow,
    listener_rate: HashMap<String, RateWindow>,
}

impl ConnectionLimits {
    pub fn new(config: LimitsConfig) -> ConnectionLimits {
        ConnectionLimits {
            config,
            total: 0,
            per_listener: HashMap::new(),
            per_ip: HashMap::new(),
            broker_rate: RateWindow::default(),
            listener_rate: HashMap::new(),
        }
    }

    pub fn open_connections(&self) -> usize {
        self.total
    }

    /// Counts a new connection of `listener` from `ip` at `now_ms`, or refuses it (and counts
    /// nothing). Every `Ok` is matched by one [`Self::close`].
    pub fn try_open(&mut self, listener: &str, ip: IpAddr, now_ms: u64) -> Result<(), Refusal> {
        let c = &self.config;
        let ip_count = self.per_ip.get(&ip).copied().unwrap_or(0);
        if let Some(max) = c.per_ip_max(ip).filter(|&max| ip_count >= max) {
            return Err(Refusal::PerIp { ip, max });
        }
        let listener_count = self.per_listener.get(listener).copied().unwrap_or(0);
        if let Some(&max) = c
            .listener_max_connections
            .get(listener)
            .filter(|&&max| listener_count >= max)
        {
            return Err(Refusal::Listener {
                listener: listener.to_string(),
                max,
            });
        }
        if let Some(max) = c.max_connections.filter(|&max| self.total >= max) {
            return Err(Refusal::Broker { max });
        }
        if let Some(&rate) = c.listener_max_creation_rate.get(listener) {
            let window = self.listener_rate.entry(listener.to_string()).or_default();
            if window.count(now_ms) >= rate {
                return Err(Refusal::ListenerRate {
                    listener: listener.to_string(),
                    per_second: rate,
                });
            }
        }
        if let Some(rate) = c.max_creation_rate {
            if self.broker_rate.count(now_ms) >= rate {
                return Err(Refusal::BrokerRate { per_second: rate });
            }
        }
        if c.listener_max_creation_rate.contains_key(listener) {
            let window = self.listener_rate.get_mut(listener).expect("counted above");
            window.accepted_ms.push_back(now_ms);
        }
        if c.max_creation_rate.is_some() {
            self.broker_rate.accepted_ms.push_back(now_ms);
        }
        self.total += 1;
        *self.per_listener.entry(listener.to_string()).or_default() += 1;
        *self.per_ip.entry(ip).or_default() += 1;
        Ok(())
    }

    /// A connection counted by [`Self::try_open`] closed.
    pub fn close(&mut self, listener: &str, ip: IpAddr) {
        assert!(self.total > 0, "close without open");
        self.total -= 1;
        let l = self
            .per_listener
            .get_mut(listener)
            .expect("opened on this listener");
        *l -= 1;
        if *l == 0 {
            self.per_listener.remove(listener);
        }
        let n = self.per_ip.get_mut(&ip).expect("opened from this IP");
        *n -= 1;
        if *n == 0 {
            self.per_ip.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Random opens, closes and clock steps against a trivial model: counts recomputed from
    /// the list of open connections and the list of accept times.
    #[test]
    fn against_a_model() {
        let config = LimitsConfig {
            max_connections: Some(9),
            listener_max_connections: [("A".to_string(), 5)].into(),
            max_connections_per_ip: Some(3),
            per_ip_overrides: [(ip(1), 6)].into(),
            max_creation_rate: Some(7),
            listener_max_creation_rate: [("B".to_string(), 4)].into(),
        };
        for seed in 0..50 {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let mut limits = ConnectionLimits::new(config.clone());
            let mut open: Vec<(String, IpAddr)> = Vec::new();
            let mut accepts: Vec<(String, u64)> = Vec::new();
            let mut now = 0u64;
            for _ in 0..400 {
                match rng.gen_range(0..10) {
                    0..=5 => {
                        let l = if rng.gen_bool(0.5) { "A" } else { "B" }.to_string();
                        let who = ip(rng.gen_range(1..4));
                        let recent = |only: Option<&str>| {
                            accepts
                                .iter()
                                .filter(|(al, t)| {
                                    t + CONNECTION_RATE_WINDOW_MS > now
                                        && only.is_none_or(|o| o == al.as_str())
                                })
                                .count()
                        };
                        let ip_max = if who == ip(1) { 6 } else { 3 };
                        let expected_ok = open.iter().filter(|(_, i)| *i == who).count() < ip_max
                            && (l != "A" || open.iter().filter(|(ol, _)| *ol == "A").count() < 5)
                            && open.len() < 9
                            && (l != "B" || recent(Some("B")) < 4)
                            && recent(None) < 7;
                        let got = limits.try_open(&l, who, now);
                        assert_eq!(got.is_ok(), expected_ok, "seed {seed}: {got:?}");
                        if got.is_ok() {
                            open.push((l.clone(), who));
                            accepts.push((l, now));
                        }
                    }
                    6..=8 if !open.is_empty() => {
                        let (l, who) = open.swap_remove(rng.gen_range(0..open.len()));
                        limits.close(&l, who);
                    }
                    _ => now += rng.gen_range(0..400),
                }
                assert_eq!(limits.open_connections(), open.len());
            }
        }
    }

    #[test]
    fn refusals_name_the_limit() {
        let mut l = ConnectionLimits::new(LimitsConfig {
            max_connections_per_ip: Some(1),
            ..LimitsConfig::default()
        });
        l.try_open("X", ip(1), 0).unwrap();
        assert_eq!(
            l.try_open("X", ip(1), 0),
            Err(Refusal::PerIp { ip: ip(1), max: 1 })
        );
        l.try_open("X", ip(2), 0).unwrap();
        l.close("X", ip(1));
        l.try_open("X", ip(1), 0).unwrap();
        assert!(LimitsConfig::default().is_unlimited());
    }
}
