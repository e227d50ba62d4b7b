//! Pod IPs, as a node's IPAM gives them: keel's "nodes" for addresses are the controller
//! shards. `--pod-cidr` is split into one block per shard, and the replica holding a shard
//! gives its Pods the lowest free address of the block, as the host-local IPAM plugin does on
//! a node's `podCIDR`. A shard has one holder at a time and that holder's cache holds every
//! Pod of the shard, so addresses are unique without any shared state; those given but not yet
//! in the cache are remembered until they are.
//!
//! Limit, on purpose: a Pod whose controller changes moves to another shard with its address,
//! which its old block may give again (controllers rarely adopt running Pods).

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Mutex, PoisonError};

use keel_api::Metadata;
use serde_json::Value;

/// `--pod-cidr` and the shard count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCidr {
    base: u32,
    /// Addresses per shard's block, a power of two.
    block: u32,
}

impl PodCidr {
    /// `cidr` (IPv4, at most a /24) split into `shards` blocks of at least 4 addresses.
    pub fn parse(cidr: &str, shards: u32) -> Result<PodCidr, String> {
        let bad = || format!("--pod-cidr {cidr:?}: expected an IPv4 network such as 10.244.0.0/16");
        let (ip, prefix) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u32 = prefix.parse().map_err(|_| bad())?;
        if !(8..=24).contains(&prefix) {
            return Err(format!(
                "--pod-cidr {cidr:?}: the prefix must be from /8 to /24"
            ));
        }
        let size = 1u32 << (32 - prefix);
        let per_shard = size / shards.max(1);
        if per_shard < 4 {
            return Err(format!(
                "--pod-cidr {cidr:?}: too small for {shards} shards of at least 4 addresses"
            ));
        }
        let block = 1u32 << (31 - per_shard.leading_zeros());
        Ok(PodCidr {
            base: u32::from(ip) & !(size - 1),
            block,
        })
    }

    fn contains(&self, shard: u32, ip: u32) -> bool {
        let start = self.base + shard * self.block;
        (start..start + self.block).contains(&ip)
    }
}

/// The addresses given out by this replica, per shard.
pub struct PodIps {
    cidr: PodCidr,
    /// Given and not yet seen in the cache, by Pod uid. Bounded: an entry leaves when its Pod
    /// shows the address, or is gone from the cache.
    pending: Mutex<HashMap<String, u32>>,
}

fn pod_ip(pod: &Value) -> Option<u32> {
    pod["status"]["podIP"]
        .as_str()
        .and_then(|s| s.parse::<Ipv4Addr>().ok())
        .map(u32::from)
}

impl PodIps {
    pub fn new(cidr: PodCidr) -> PodIps {
        PodIps {
            cidr,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// An address for `pod` in `shard`'s block, given `cached`, the Pods of the cache (the
    /// shard's among them). The same address again for a Pod already given one; `None` when
    /// the block is full.
    pub fn assign(
        &self,
        pod: &Value,
        shard: u32,
        cached: &[std::sync::Arc<Value>],
    ) -> Option<Ipv4Addr> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let live: HashMap<&str, Option<u32>> =
            cached.iter().map(|p| (p.uid(), pod_ip(p))).collect();
        // Seen in the cache with an address, or gone: no longer pending.
        pending.retain(|uid, _| matches!(live.get(uid.as_str()), Some(None)));
        if let Some(ip) = pending.get(pod.uid()) {
            return Some(Ipv4Addr::from(*ip));
        }
        let used: HashSet<u32> = live
            .values()
            .flatten()
            .copied()
            .chain(pending.values().copied())
            .filter(|ip| self.cidr.contains(shard, *ip))
            .collect();
        let start = self.cidr.base + shard * self.cidr.block;
        // The block's first and last addresses are its network and broadcast.
        let ip = (start + 1..start + self.cidr.block - 1).find(|ip| !used.contains(ip))?;
        pending.insert(pod.uid().to_string(), ip);
        Some(Ipv4Addr::from(ip))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use serde_json::json;

    fn pod(uid: &str, ip: Option<&str>) -> Arc<Value> {
        Arc::new(json!({"metadata": {"uid": uid}, "status": {"podIP": ip}}))
    }

    #[test]
    fn the_cidr_is_split_into_a_block_per_shard() {
        let c = PodCidr::parse("10.244.0.0/16", 32).unwrap();
        assert_eq!(c.block, 2048);
        assert!(c.contains(1, u32::from(Ipv4Addr::new(10, 244, 8, 1))));
        assert!(!c.contains(0, u32::from(Ipv4Addr::new(10, 244, 8, 1))));
        assert_eq!(PodCidr::parse("10.0.0.0/24", 64).unwrap().block, 4);
        assert!(PodCidr::parse("10.0.0.0/24", 128).is_err());
        assert!(PodCidr::parse("fd00::/64", 32).is_err());
        assert!(PodCidr::parse("10.0.0.0/30", 1).is_err());
    }

    #[test]
    fn each_pod_gets_the_lowest_free_address_of_its_shard_once() {
        let ips = PodIps::new(PodCidr::parse("10.244.0.0/16", 32).unwrap());
        let cached = vec![pod("a", Some("10.244.8.1")), pod("b", None), pod("c", None)];
        let b = ips.assign(&cached[1], 1, &cached).unwrap();
        assert_eq!(b, Ipv4Addr::new(10, 244, 8, 2));
        // Not yet in the cache: b keeps its address, c gets the next one.
        assert_eq!(ips.assign(&cached[1], 1, &cached), Some(b));
        assert_eq!(
            ips.assign(&cached[2], 1, &cached),
            Some(Ipv4Addr::new(10, 244, 8, 3))
        );
        // Another shard draws from its own block.
        let d = pod("d", None);
        assert_eq!(
            ips.assign(&d, 0, std::slice::from_ref(&d)),
            Some(Ipv4Addr::new(10, 244, 0, 1))
        );
        // Once b is gone its address is free again.
        let after = vec![
            cached[0].clone(),
            pod("c", Some("10.244.8.3")),
            pod("e", None),
        ];
        assert_eq!(
            ips.assign(&after[2], 1, &after),
            Some(Ipv4Addr::new(10, 244, 8, 2))
        );
    }

    #[test]
    fn a_full_block_gives_nothing() {
        let ips = PodIps::new(PodCidr::parse("10.0.0.0/24", 64).unwrap());
        let pods: Vec<Arc<Value>> = (0..3).map(|i| pod(&format!("p{i}"), None)).collect();
        assert!(ips.assign(&pods[0], 0, &pods).is_some());
        assert!(ips.assign(&pods[1], 0, &pods).is_some());
        assert!(ips.assign(&pods[2], 0, &pods).is_none());
    }
}
