//! The parts of a `grpc://host:port/instance` or `grpcs://…` URL, checked.

/// The parts of a `grpc://` or `grpcs://` URL.
#[derive(Debug, PartialEq)]
pub(super) struct Address {
    /// `http://host:port` or `https://host:port`, for the channel.
    pub uri: String,
    pub host: String,
    pub tls: bool,
    pub instance: String,
}

/// Path segments the API's resource names use, which an instance name cannot hold.
const RESERVED: [&str; 7] = [
    "blobs",
    "uploads",
    "actions",
    "actionResults",
    "operations",
    "capabilities",
    "compressed-blobs",
];

pub(super) fn parse_address(url: &str) -> std::result::Result<Address, String> {
    let parsed = reqwest::Url::parse(url.trim_end_matches('/')).map_err(|e| e.to_string())?;
    let tls = match parsed.scheme() {
        "grpc" => false,
        "grpcs" => true,
        other => return Err(format!("scheme `{other}` is not grpc or grpcs")),
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(
            "credentials in a grpc URL are not sent; put the token in KART_REMOTE_TOKEN".into(),
        );
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("a grpc URL has no query or fragment".into());
    }
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or("no host")?
        .to_string();
    let port = parsed.port().unwrap_or(if tls { 443 } else { 80 });
    let instance = parsed.path().trim_matches('/').to_string();
    if instance.len() > 200 {
        return Err("the instance name is longer than 200 characters".into());
    }
    if !instance.is_empty() {
        for segment in instance.split('/') {
            let plain = !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !plain {
                return Err(format!(
                    "instance name {} may hold only letters, digits, `-`, `_`, `.` and single `/` between parts",
                    crate::untrusted::quoted(&instance)
                ));
            }
            if RESERVED.contains(&segment) {
                return Err(format!(
                    "instance name `{instance}` holds `{segment}`, a word of the API's resource names"
                ));
            }
        }
    }
    let uri = format!("{}://{host}:{port}", if tls { "https" } else { "http" });
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok(Address {
        uri,
        host,
        tls,
        instance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_host_port_and_instance() {
        let a = parse_address("grpc://127.0.0.1:8980/main/").unwrap();
        assert_eq!(
            a,
            Address {
                uri: "http://127.0.0.1:8980".into(),
                host: "127.0.0.1".into(),
                tls: false,
                instance: "main".into(),
            }
        );
        let a = parse_address("grpcs://cache.example/a/b").unwrap();
        assert_eq!(
            (a.uri.as_str(), a.tls, a.instance.as_str()),
            ("https://cache.example:443", true, "a/b")
        );
        assert_eq!(parse_address("grpc://[::1]:9").unwrap().host, "::1");
        for bad in [
            "grpc://u:p@host:1/x",
            "grpc://host:1/x?token=1",
            "grpc://host:1/a//b",
            "grpc://host:1/blobs",
            "grpc://host:1/a%20b",
            "http://host:1/x",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }
}
