//! Webhooks as a feature: their rows, declared once, their resolution, and
//! what they resolve to ([`WebhookConfig`]); off unless a URL is given.

use crate::config::options::{Spec, WORK, spec};
use crate::config::{
    Config, ConfigError, Feature, Origin, Resolving, Secret, Section, Settings, or_default,
    redact_url,
};
use std::path::PathBuf;
use std::sync::Arc;

pub const WEBHOOK: Spec = spec(
    "webhook",
    "--webhook",
    "LEADERD_WEBHOOK_URL",
    "webhook.urls",
)
.value("URL")
.under(WORK)
.help("Webhook to POST elected/demoted events to; repeatable")
.list();
pub const WEBHOOK_SECRET_FILE: Spec = spec(
    "webhook_secret_file",
    "--webhook-secret-file",
    "LEADERD_WEBHOOK_SECRET_FILE",
    "webhook.secret_file",
)
.value("FILE")
.under(WORK)
.help("File holding the webhook signing secret (or LEADERD_WEBHOOK_SECRET: the secret itself)");
pub const WEBHOOK_SECRET: Spec = spec("webhook_secret", "", "LEADERD_WEBHOOK_SECRET", "")
    .no_flag()
    .no_key()
    .value("SECRET")
    .under(WORK)
    .secret()
    .help("The webhook signing secret itself (base64 or whsec_…; only from the environment)");

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub urls: Vec<url::Url>,
    /// The secret from `LEADERD_WEBHOOK_SECRET`.
    pub secret: Option<Secret>,
    /// The file to read the secret from, when given instead.
    pub secret_file: Option<PathBuf>,
}

impl WebhookConfig {
    /// The configured webhooks, if any.
    pub fn of(config: &Config) -> Option<&WebhookConfig> {
        config.features.get::<WebhookConfig>()
    }
}

pub static FEATURE: Feature = Feature {
    name: "webhooks",
    section: Section::Work,
    options: &[&WEBHOOK, &WEBHOOK_SECRET_FILE, &WEBHOOK_SECRET],
    resolve,
};

fn resolve(x: &mut Resolving<'_>) -> Result<Option<Arc<dyn Settings>>, ConfigError> {
    let urls = x.r.list(&WEBHOOK, parse_url)?;
    let urls = or_default(urls, Vec::new(), "none");
    let shown: Vec<String> = urls.value.iter().map(|u| redact_url(u.as_str())).collect();
    x.note("webhook.urls", format!("{shown:?}"), &urls.origin);
    let secret_env = WEBHOOK_SECRET.env.expect("declared");
    let secret = x.r.env(secret_env)?.map(Secret::new);
    let secret_file = x.r.scalar(&WEBHOOK_SECRET_FILE, |p| Ok(PathBuf::from(p)))?;
    if secret.is_some() && secret_file.is_some() {
        return Err(ConfigError(
            "both LEADERD_WEBHOOK_SECRET and a webhook secret file are set; choose one".into(),
        ));
    }
    if secret.is_some() {
        x.note("webhook.secret", "\"***\"".into(), &Origin::Env(secret_env));
    }
    if let Some(file) = &secret_file {
        let shown = format!("{:?}", file.value.display().to_string());
        x.note("webhook.secret_file", shown, &file.origin);
    }
    if urls.value.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(WebhookConfig {
        urls: urls.value,
        secret,
        secret_file: secret_file.map(|f| f.value),
    })))
}

pub fn parse_url(text: &str) -> Result<url::Url, String> {
    let redacted = redact_url(text);
    let parsed = url::Url::parse(text.trim())
        .map_err(|e| format!("`{redacted}` is not a valid URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("`{redacted}` must be an http:// or https:// URL"));
    }
    Ok(parsed)
}
