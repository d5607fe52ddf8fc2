//! The options of what the Kubernetes backend announces (issue #48),
//! declared once here and resolved into [`Announce`]: the Service that
//! follows the leader (`--kubernetes-service`, its ports and the pod's
//! address) and the Events on the Lease (`--kubernetes-events`).

use super::super::names::parse_label;
use crate::config::options::{BACKEND, Commas, Spec, spec};
use crate::config::{ConfigError, Origin, Resolving, Value, or_default};
use std::net::IpAddr;

/// What the backend announces of each term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    pub service: Option<ServiceConfig>,
    /// An Event on the Lease as each term begins and ends.
    pub events: bool,
}

/// The Service the leader keeps pointed at itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// The Service's name, in the Lease's namespace.
    pub name: String,
    /// The EndpointSlice leaderd writes: `NAME-leaderd`.
    pub slice: String,
    pub ports: Vec<Port>,
    /// This pod's IP, the one address the slice ever holds.
    pub address: IpAddr,
}

/// One port of the slice; `name` matches the Service's port of that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub port: u16,
    pub protocol: &'static str,
}

pub const KUBERNETES_SERVICE: Spec = spec(
    "kubernetes_service",
    "--kubernetes-service",
    "LEADERD_KUBERNETES_SERVICE",
    "kubernetes.service",
)
.value("NAME")
.under(BACKEND)
.help("Keep the selector-less Service NAME pointed at the leader: the leader writes its EndpointSlice NAME-leaderd with its own address as its work starts, and empties it before it releases")
.default("none");

pub const KUBERNETES_SERVICE_PORTS: Spec = spec(
    "kubernetes_service_ports",
    "--kubernetes-service-ports",
    "LEADERD_KUBERNETES_SERVICE_PORTS",
    "kubernetes.service_ports",
)
.value("NAME:PORT")
.under(BACKEND)
.help("The Service's ports on the leader, NAME:PORT[/PROTOCOL] (the names the Service's ports have; PORT alone for a Service with one unnamed port); repeat or separate with commas")
.list()
.commas(Commas::Separate)
.default("none: required with --kubernetes-service");

pub const KUBERNETES_SERVICE_ADDRESS: Spec = spec(
    "kubernetes_service_address",
    "--kubernetes-service-address",
    "LEADERD_KUBERNETES_SERVICE_ADDRESS",
    "kubernetes.service_address",
)
.value("IP")
.under(BACKEND)
.help("The leader's address in the Service's EndpointSlice")
.default("$POD_IP (the downward API's status.podIP)");

pub const KUBERNETES_EVENTS: Spec = spec(
    "kubernetes_events",
    "--kubernetes-events",
    "LEADERD_KUBERNETES_EVENTS",
    "kubernetes.events",
)
.value("BOOL")
.under(BACKEND)
.help("Record an Event on the Lease as each term begins and ends (LeaderElected, LeaseReleased, LeaderLost), rate-limited; needs create on events")
.switch()
.default("true");

/// The rows, in `--help`'s order.
pub const ROWS: [&Spec; 4] = [
    &KUBERNETES_SERVICE,
    &KUBERNETES_SERVICE_PORTS,
    &KUBERNETES_SERVICE_ADDRESS,
    &KUBERNETES_EVENTS,
];

fn parse_service(text: &str) -> Result<String, String> {
    // The slice's name adds "-leaderd" and must stay a valid name.
    let name = parse_label("Service name", text)?;
    if name.len() > 63 - "-leaderd".len() {
        return Err(format!(
            "`{text}` is too long: leaderd names the Service's EndpointSlice `{text}-leaderd`, so at most 55 characters"
        ));
    }
    Ok(name)
}

/// `NAME:PORT[/PROTOCOL]` or `PORT[/PROTOCOL]`.
pub fn parse_port(text: &str) -> Result<Port, String> {
    let (rest, protocol) = match text.split_once('/') {
        Some((rest, p)) => match p.to_ascii_uppercase().as_str() {
            "TCP" => (rest, "TCP"),
            "UDP" => (rest, "UDP"),
            "SCTP" => (rest, "SCTP"),
            _ => {
                return Err(format!(
                    "`{text}`: the protocol is TCP, UDP or SCTP, not `{p}`"
                ));
            }
        },
        None => (text, "TCP"),
    };
    let (name, port) = match rest.rsplit_once(':') {
        Some((name, port)) => (parse_label("port name", name)?, port),
        None => (String::new(), rest),
    };
    let port: u16 =
        port.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            format!("`{text}` is not NAME:PORT[/PROTOCOL]: the port is 1 to 65535")
        })?;
    Ok(Port {
        name,
        port,
        protocol,
    })
}

fn parse_address(text: &str) -> Result<IpAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "`{text}` is not an IP address; give the pod's IP (the downward API's status.podIP)"
        )
    })
}

/// The ports, checked together: names unique, and unnamed only alone.
fn check_ports(ports: &[Port]) -> Result<(), String> {
    if ports.len() > 1 && ports.iter().any(|p| p.name.is_empty()) {
        return Err(
            "several ports need a name each (NAME:PORT), the names of the Service's ports".into(),
        );
    }
    for (i, p) in ports.iter().enumerate() {
        if ports[..i].iter().any(|q| q.name == p.name) {
            return Err(format!("the port name `{}` is given twice", p.name));
        }
    }
    Ok(())
}

/// Resolves the rows, noting each value for `check`.
pub fn resolve(x: &mut Resolving<'_>) -> Result<Announce, ConfigError> {
    let events = x.r.scalar(&KUBERNETES_EVENTS, crate::config::parse_bool)?;
    let events = or_default(events, true, "");
    x.note(
        "kubernetes.events",
        events.value.to_string(),
        &events.origin,
    );
    let service = x.r.scalar(&KUBERNETES_SERVICE, parse_service)?;
    let ports = x.r.list(&KUBERNETES_SERVICE_PORTS, parse_port)?;
    let address = x.r.scalar(&KUBERNETES_SERVICE_ADDRESS, parse_address)?;
    let Some(service) = service else {
        if let Some(given) = ports.map(|p| p.origin).or(address.map(|a| a.origin)) {
            return Err(ConfigError(format!(
                "{given}: a port or address of the leader's Service, but no Service; give --kubernetes-service NAME too"
            )));
        }
        return Ok(Announce {
            service: None,
            events: events.value,
        });
    };
    x.note(
        "kubernetes.service",
        format!("{:?}", service.value),
        &service.origin,
    );
    let Some(ports) = ports else {
        return Err(ConfigError(format!(
            "{}: the Service {:?} needs the leader's ports; give --kubernetes-service-ports NAME:PORT (the Service's port names)",
            service.origin, service.value
        )));
    };
    check_ports(&ports.value).map_err(|e| ConfigError(format!("{}: {e}", ports.origin)))?;
    let shown: Vec<String> = ports.value.iter().map(Port::shown).collect();
    x.note(
        "kubernetes.service_ports",
        format!("{shown:?}"),
        &ports.origin,
    );
    let address = match address {
        Some(a) => a,
        None => match x.r.env("POD_IP")? {
            Some(ip) => Value {
                value: parse_address(&ip).map_err(|e| ConfigError(format!("POD_IP: {e}")))?,
                origin: Origin::Default("$POD_IP"),
            },
            None => {
                return Err(ConfigError(format!(
                    "{}: the Service {:?} needs the leader's address: set POD_IP from the downward API (fieldRef status.podIP), or give --kubernetes-service-address IP",
                    service.origin, service.value
                )));
            }
        },
    };
    x.note(
        "kubernetes.service_address",
        format!("{:?}", address.value.to_string()),
        &address.origin,
    );
    Ok(Announce {
        service: Some(ServiceConfig {
            slice: format!("{}-leaderd", service.value),
            name: service.value,
            ports: ports.value,
            address: address.value,
        }),
        events: events.value,
    })
}

impl Port {
    /// As given: `NAME:PORT/PROTOCOL`.
    pub fn shown(&self) -> String {
        match self.name.as_str() {
            "" => format!("{}/{}", self.port, self.protocol),
            name => format!("{name}:{}/{}", self.port, self.protocol),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_name_port_protocol_and_names_are_labels() {
        let p = parse_port("http:8080").unwrap();
        assert_eq!((p.name.as_str(), p.port, p.protocol), ("http", 8080, "TCP"));
        let p = parse_port("dns:53/udp").unwrap();
        assert_eq!((p.name.as_str(), p.port, p.protocol), ("dns", 53, "UDP"));
        let p = parse_port("9000").unwrap();
        assert_eq!((p.name.as_str(), p.port), ("", 9000));
        for bad in [
            "http:0",
            "http:x",
            "Http:80",
            "http:80/icmp",
            ":80",
            "http:70000",
        ] {
            assert!(parse_port(bad).is_err(), "{bad}");
        }
        let two_unnamed = [parse_port("80").unwrap(), parse_port("a:81").unwrap()];
        assert!(check_ports(&two_unnamed).is_err());
        let twice = [parse_port("a:80").unwrap(), parse_port("a:81").unwrap()];
        assert!(check_ports(&twice).unwrap_err().contains("twice"));
        assert!(parse_service(&"a".repeat(56)).is_err());
        assert!(parse_service("jobs").is_ok());
    }
}
