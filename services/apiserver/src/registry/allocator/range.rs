//! The ranges Services draw from, as Kubernetes lays them out: the values each has, the bit of
//! the bitmap each value is, and the static subrange random choice avoids. Pure arithmetic.

use std::fmt;
use std::net::Ipv4Addr;

/// A range given on the command line that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("{0:?} is not a CIDR (e.g. 10.96.0.0/12)")]
    NotCidr(String),
    #[error("{0}: IPv6 service ranges are not supported by keel; give an IPv4 range")]
    Ipv6(String),
    #[error("{0}: the range is too large; for 32-bit addresses, the mask must be >= 12")]
    TooLarge(String),
    #[error("{0}: the range must hold at least 8 IP addresses (a mask of at most /29)")]
    TooSmall(String),
    #[error("{0:?} is not a port range (e.g. 30000-32767)")]
    NotPortRange(String),
}

/// The value of a range: an address or a port, as a number.
pub type Value = u32;

/// The cluster IP range (`--service-cluster-ip-range`), IPv4: every address but the network
/// and broadcast addresses, offset 0 being the network address + 1 (Kubernetes'
/// `ipallocator.Range`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    network: u32,
    prefix: u8,
}

impl IpRange {
    /// Parses a CIDR; host bits are ignored, as Go's `net.ParseCIDR` does. At most a /12 (a
    /// bitmap of 128 KiB, what Kubernetes allows) and at least 8 addresses.
    pub fn parse(s: &str) -> Result<IpRange, RangeError> {
        let (ip, prefix) = s
            .split_once('/')
            .ok_or_else(|| RangeError::NotCidr(s.to_string()))?;
        if ip.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(RangeError::Ipv6(s.to_string()));
        }
        let ip: Ipv4Addr = ip.parse().map_err(|_| RangeError::NotCidr(s.to_string()))?;
        let prefix: u8 = match prefix.parse() {
            Ok(p) if p <= 32 && !prefix.starts_with('+') => p,
            _ => return Err(RangeError::NotCidr(s.to_string())),
        };
        if prefix < 12 {
            return Err(RangeError::TooLarge(s.to_string()));
        }
        if prefix > 29 {
            return Err(RangeError::TooSmall(s.to_string()));
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(IpRange {
            network: u32::from(ip) & mask,
            prefix,
        })
    }

    /// Addresses in the CIDR, network and broadcast included.
    fn cidr_size(&self) -> u32 {
        1 << (32 - self.prefix)
    }

    /// The first address of the range: what Kubernetes gives the `kubernetes` Service.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.network + 1)
    }
}

impl fmt::Display for IpRange {
    /// `10.96.0.0/12`, as Kubernetes writes the range into its `RangeAllocation`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.network), self.prefix)
    }
}

/// The node port range (`--service-node-port-range`): `base` and the `size - 1` ports after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    base: u32,
    size: u32,
}

impl PortRange {
    /// Parses Kubernetes' forms: `30000-32767`, `30000+2767`, or a single port.
    pub fn parse(s: &str) -> Result<PortRange, RangeError> {
        let bad = || RangeError::NotPortRange(s.to_string());
        let port = |p: &str| -> Result<u32, RangeError> {
            match p.trim().parse::<u32>() {
                Ok(n) if (1..=65535).contains(&n) && !p.trim().starts_with('+') => Ok(n),
                _ => Err(bad()),
            }
        };
        let (base, last) = if let Some((a, b)) = s.split_once('-') {
            (port(a)?, port(b)?)
        } else if let Some((a, n)) = s.split_once('+') {
            let base = port(a)?;
            let n: u32 = n.trim().parse().map_err(|_| bad())?;
            (
                base,
                base.checked_add(n)
                    .filter(|l| *l <= 65535)
                    .ok_or_else(bad)?,
            )
        } else {
            let p = port(s)?;
            (p, p)
        };
        if last < base {
            return Err(bad());
        }
        Ok(PortRange {
            base,
            size: last - base + 1,
        })
    }
}

impl fmt::Display for PortRange {
    /// `30000-32767`, as Kubernetes writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.base, self.base + self.size - 1)
    }
}

/// A range of either kind: its values, their offsets in the bitmap, and the static subrange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    Ips(IpRange),
    Ports(PortRange),
}

impl Range {
    /// How many values the range has: the bitmap's size.
    pub fn max(&self) -> usize {
        match self {
            Range::Ips(r) => (r.cidr_size() - 2) as usize,
            Range::Ports(r) => r.size as usize,
        }
    }

    /// The lower offsets that random choice takes last, kept for values clients choose:
    /// `min(max(16, size / 16), 256)` addresses of a CIDR (KEP-3070), `min(max(16, size /
    /// 32), 128)` ports (KEP-3668); none for ranges of at most 16.
    pub fn static_offset(&self) -> usize {
        let (size, step, most) = match self {
            Range::Ips(r) => (r.cidr_size(), 16, 256),
            Range::Ports(r) => (r.size, 32, 128),
        };
        if size <= 16 {
            return 0;
        }
        (size / step).clamp(16, most) as usize
    }

    /// The offset of `v` in the bitmap, if it is in the range.
    pub fn offset_of(&self, v: Value) -> Option<usize> {
        let base = match self {
            Range::Ips(r) => r.network + 1,
            Range::Ports(r) => r.base,
        };
        let i = v.checked_sub(base)? as usize;
        (i < self.max()).then_some(i)
    }

    /// The value at offset `i` (which must be below [`Range::max`]).
    pub fn value_at(&self, i: usize) -> Value {
        let base = match self {
            Range::Ips(r) => r.network + 1,
            Range::Ports(r) => r.base,
        };
        base + i as u32
    }

    /// A value as clients write it, parsed: an IPv4 address, or a port number.
    pub fn parse_value(&self, s: &str) -> Option<Value> {
        match self {
            Range::Ips(_) => s.parse::<Ipv4Addr>().ok().map(u32::from),
            Range::Ports(_) => s.parse::<u32>().ok(),
        }
    }

    /// A value as clients write it.
    pub fn show(&self, v: Value) -> String {
        match self {
            Range::Ips(_) => Ipv4Addr::from(v).to_string(),
            Range::Ports(_) => v.to_string(),
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Range::Ips(r) => r.fmt(f),
            Range::Ports(r) => r.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(s: &str) -> Range {
        Range::Ips(IpRange::parse(s).unwrap())
    }

    fn ports(s: &str) -> Range {
        Range::Ports(PortRange::parse(s).unwrap())
    }

    #[test]
    fn the_default_cluster_ip_range_skips_network_and_broadcast_and_keeps_256_static() {
        let r = ips("10.96.0.0/12");
        assert_eq!(r.to_string(), "10.96.0.0/12");
        assert_eq!(r.max(), (1 << 20) - 2);
        assert_eq!(r.static_offset(), 256);
        let ip = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap());
        assert_eq!(r.offset_of(ip("10.96.0.1")), Some(0));
        assert_eq!(
            r.offset_of(ip("10.96.1.0")),
            Some(255),
            "the last static one"
        );
        assert_eq!(r.offset_of(ip("10.96.0.0")), None, "the network address");
        assert_eq!(
            r.offset_of(ip("10.111.255.255")),
            None,
            "the broadcast address"
        );
        assert_eq!(r.offset_of(ip("10.111.255.254")), Some(r.max() - 1));
        assert_eq!(r.offset_of(ip("10.112.0.1")), None);
        assert_eq!(r.offset_of(ip("10.95.255.255")), None);
        assert_eq!(r.show(r.value_at(4)), "10.96.0.5");
        assert_eq!(r.parse_value("10.96.0.5"), Some(r.value_at(4)));
        assert_eq!(r.parse_value("fd00::1"), None);
    }

    #[test]
    fn the_static_subrange_follows_kep_3070_for_cidrs() {
        // min(max(16, size/16), 256), 0 at 16 addresses or fewer.
        assert_eq!(ips("10.0.0.0/29").static_offset(), 0);
        assert_eq!(ips("10.0.0.0/28").static_offset(), 0);
        assert_eq!(ips("10.0.0.0/27").static_offset(), 16);
        assert_eq!(ips("10.0.0.0/23").static_offset(), 32);
        assert_eq!(ips("10.0.0.0/20").static_offset(), 256);
        assert_eq!(ips("10.0.0.0/23").max(), 510);
    }

    #[test]
    fn the_default_node_port_range_keeps_86_static_ports() {
        let r = ports("30000-32767");
        assert_eq!(r.to_string(), "30000-32767");
        assert_eq!(r.max(), 2768);
        assert_eq!(r.static_offset(), 86);
        assert_eq!(r.offset_of(30000), Some(0));
        assert_eq!(r.offset_of(32767), Some(2767));
        assert_eq!(r.offset_of(32768), None);
        assert_eq!(r.offset_of(29999), None);
        assert_eq!(r.value_at(80), 30080);
        // min(max(16, size/32), 128).
        assert_eq!(ports("30000-30015").static_offset(), 0);
        assert_eq!(ports("30000-30016").static_offset(), 16);
        assert_eq!(ports("1-65535").static_offset(), 128);
    }

    #[test]
    fn port_ranges_parse_as_kubernetes_writes_them() {
        assert_eq!(ports("30000+2767"), ports("30000-32767"));
        assert_eq!(ports("30080").max(), 1);
        for bad in [
            "",
            "a-b",
            "0-10",
            "10-5",
            "1-65536",
            "65000+1000",
            "-1",
            "30000-",
        ] {
            assert_eq!(
                PortRange::parse(bad),
                Err(RangeError::NotPortRange(bad.into())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn cluster_ip_ranges_are_ipv4_between_a_12_and_a_29() {
        assert_eq!(
            ips("10.96.0.5/12"),
            ips("10.96.0.0/12"),
            "host bits ignored"
        );
        assert!(matches!(
            IpRange::parse("fd00::/108"),
            Err(RangeError::Ipv6(_))
        ));
        assert!(matches!(
            IpRange::parse("10.0.0.0/8"),
            Err(RangeError::TooLarge(_))
        ));
        assert!(matches!(
            IpRange::parse("10.0.0.0/30"),
            Err(RangeError::TooSmall(_))
        ));
        for bad in [
            "10.0.0.0",
            "10.0.0/24",
            "10.0.0.0/33",
            "10.0.0.0/+24",
            "x/12",
        ] {
            assert!(
                matches!(IpRange::parse(bad), Err(RangeError::NotCidr(_))),
                "{bad}"
            );
        }
        let e = IpRange::parse("fd00::/108").unwrap_err();
        assert_eq!(
            e.to_string(),
            "fd00::/108: IPv6 service ranges are not supported by keel; give an IPv4 range"
        );
        assert_eq!(
            IpRange::parse("10.96.0.0/12").unwrap().first().to_string(),
            "10.96.0.1"
        );
    }
}
