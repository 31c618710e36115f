//! The sample connector, bundled with the host: `acme.echo` and `acme.timestamp`.
//!
//! It is deliberately trivial: it exercises the whole path (install, bind, grant, call)
//! without any outside system, and `acme.echo` is the benchmark of a tool call's fixed
//! cost (fresh instance, dispatch, result), so its call path does no parsing at all.

use std::time::{SystemTime, UNIX_EPOCH};

use connector_sdk::{
    schema_of, AgentContext, Binding, CallContext, Connector, Manifest, NoArgs, Tool, ToolError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Arguments of `acme.echo`. Extra fields are allowed and echoed too.
#[derive(Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// Text to echo back.
    pub message: String,
}

/// Binding configuration of `acme`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcmeConfig {
    /// A greeting handed to agents as `SPRING_CONNECTOR_ACME_GREETING`.
    pub greeting: Option<String>,
}

/// Result of `acme.timestamp`.
#[derive(Serialize)]
pub struct Timestamp {
    /// The current time, RFC 3339 UTC.
    pub timestamp: String,
}

/// The connector.
pub struct Acme;

impl Connector for Acme {
    fn manifest() -> Manifest {
        Manifest::new("acme")
            .display_name("Acme")
            .description("Sample connector: echoes arguments and tells the time.")
            .version(env!("CARGO_PKG_VERSION"))
            .config::<AcmeConfig>()
            .tool(
                // Raw: the host has validated the arguments against the schema already, and
                // echo returns them byte for byte, so nothing needs parsing.
                Tool::raw(
                    "echo",
                    "Echo the arguments back unchanged.",
                    schema_of::<EchoArgs>,
                    echo,
                )
                .read_only()
                .idempotent(),
            )
            .tool(
                Tool::new("timestamp", "The current time (RFC 3339, UTC).", timestamp).read_only(),
            )
    }

    fn runtime_context(binding: &Binding) -> Result<AgentContext, String> {
        let config: AcmeConfig = binding.config_as()?;
        let mut context = AgentContext::default();
        if let Some(greeting) = config.greeting {
            context = context.env("SPRING_CONNECTOR_ACME_GREETING", greeting);
        }
        Ok(context)
    }
}

fn echo(_: &CallContext, arguments: &str) -> Result<String, ToolError> {
    Ok(arguments.to_owned())
}

fn timestamp(_: &CallContext, _: NoArgs) -> Result<Timestamp, ToolError> {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| ToolError::failed("the clock is before 1970"))?;
    Ok(Timestamp {
        timestamp: rfc3339_utc(since_epoch.as_secs()),
    })
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
///
/// Civil-from-days after Howard Hinnant's algorithm; a date crate would cost more
/// component size than these lines.
pub fn rfc3339_utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);

    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);

    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

connector_sdk::export!(Acme);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn ctx() -> CallContext {
        CallContext {
            binding: Binding {
                unit: "u".into(),
                config: Value::Null,
            },
            agent: None,
            call_id: "c".into(),
        }
    }

    #[test]
    fn manifest_is_valid() {
        let m = Acme::manifest();
        assert_eq!(m.validate(), Ok(()));
        assert_eq!(m.tool_ids(), ["acme.echo", "acme.timestamp"]);
        let echo = &m.tool_list()[0];
        assert!(echo.hints().read_only && echo.hints().idempotent);
        let schema = echo.input_schema();
        assert_eq!(schema["required"], serde_json::json!(["message"]));
        assert!(schema.get("additionalProperties").is_none());
        let ts = &m.tool_list()[1];
        assert!(ts.hints().read_only && !ts.hints().idempotent);
    }

    #[test]
    fn echo_returns_the_exact_arguments() {
        let args = r#"{"message": "hi",  "extra": [1, 2]}"#;
        assert_eq!(echo(&ctx(), args).unwrap(), args);
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(4_102_444_799), "2099-12-31T23:59:59Z");
        let now = timestamp(&ctx(), NoArgs {}).unwrap().timestamp;
        assert_eq!(now.len(), 20);
        assert!(now.ends_with('Z'));
    }

    #[test]
    fn runtime_context_exports_the_greeting() {
        let b = Binding {
            unit: "u".into(),
            config: serde_json::json!({"greeting": "hey"}),
        };
        let rc = Acme::runtime_context(&b).unwrap();
        assert_eq!(
            rc.env,
            [(
                "SPRING_CONNECTOR_ACME_GREETING".to_string(),
                "hey".to_string()
            )]
        );
        let empty = Binding {
            unit: "u".into(),
            config: serde_json::json!({}),
        };
        assert!(Acme::runtime_context(&empty).unwrap().env.is_empty());
    }
}
