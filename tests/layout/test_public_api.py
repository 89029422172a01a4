"""Public import paths and names do not shrink when modules move.

The lists below were taken from the code before the modules moved into subpackages; every
name here must still be importable from the same module path, so code written against an
older release keeps working. Adding names is fine; removing one needs a deprecation first.
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC: dict[str, list[str]] = {
    "mcpsync": [
        "ApprovalRejected", "AudioContent", "AuthHookError", "AuthHooks", "BearerToken",
        "BudgetExceeded", "CallFuture", "CallToolResult", "Cancelled", "CapabilityNotSupported",
        "Client", "ClosedError", "CompleteResult", "ConfigError", "ConnectFailed",
        "ConnectionLost", "ContentBlock", "Context", "DEFAULT_TIMEOUT", "ElicitationRequest",
        "EmbeddedResource", "GetPromptResult", "HeaderMismatch", "HttpChallenge", "ImageContent",
        "InputRoundsExceeded", "InvalidArguments", "MCPError", "ManagedTool", "Manager",
        "MissingCapability",
        "Notification", "OutputValidationError", "ParseError", "Policy", "PolicyDenied",
        "PolicyRefused", "Prompt", "PromptArgument", "PromptMessage", "ProtocolError",
        "ReadResourceResult", "Rejected", "RemoteError", "RequestFuture", "RequestTimeout",
        "Resource", "ResourceContents", "ResourceLink", "ResourceNotFound", "ResourceTemplate",
        "Root", "SamplingRequest", "SecretError", "SecretResolver", "Server", "ServerConfig",
        "ServerExited", "ServerInfo", "SessionExpired", "StreamError", "Subscription",
        "TextContent", "TooManyPages", "Tool", "ToolError", "TransportError",
        "URLElicitationRequired", "Unauthorized", "UnknownServer", "UnknownTool",
        "UnsupportedInThisEra", "UnsupportedProtocolVersion", "UsedAfterFork", "__version__",
        "connect", "load_config", "make_auth", "render_secret",
    ],
    "mcpsync.auth_hooks": [
        "AuthHooks", "BearerToken", "HttpChallenge", "make_auth",
    ],
    "mcpsync.cli": [
        "CLIError", "EXIT_AUTH", "EXIT_CONNECT", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK",
        "EXIT_TIMEOUT", "EXIT_USAGE", "build_parser", "convert_arguments", "convert_value",
        "exit_code_for", "main",
    ],
    "mcpsync.client": [
        "Client", "ElicitationRequest", "SamplingRequest", "Subscription", "connect",
    ],
    "mcpsync.config": [
        "DEFAULT_TIMEOUT", "EnvInput", "ServerConfig", "logger_name_part",
    ],
    "mcpsync.config_files": [
        "default_config_path", "expand", "load_config",
    ],
    "mcpsync.demo": [
        "ADD_OUTPUT_SCHEMA", "build_server", "main",
    ],
    "mcpsync.errors": [
        "ApprovalRejected", "AuthHookError", "BudgetExceeded", "Cancelled",
        "CapabilityNotSupported", "ClosedError", "ConfigError", "ConnectFailed", "ConnectionLost",
        "HeaderMismatch", "InputRoundsExceeded", "InvalidArguments", "MCPError",
        "MissingCapability",
        "OutputValidationError", "PolicyDenied", "PolicyRefused", "ProtocolError", "Rejected",
        "RemoteError", "RequestTimeout", "ResourceNotFound", "SecretError", "ServerExited",
        "SessionExpired", "TooManyPages", "ToolError", "TransportError", "URLElicitationRequired",
        "Unauthorized", "UnknownServer", "UnknownTool", "UnsupportedInThisEra",
        "UnsupportedProtocolVersion", "UsedAfterFork",
    ],
    "mcpsync.jsonrpc": [
        "APPROVAL_REJECTED", "BUDGET_EXCEEDED", "Batch", "DENIED_BY_POLICY", "FrameDecoder",
        "FrameReader", "FrameWriter", "HEADER_MISMATCH", "INTERNAL_ERROR", "INVALID_PARAMS",
        "INVALID_REQUEST", "MAX_FRAME_BYTES", "METHOD_NOT_FOUND", "MISSING",
        "MISSING_CLIENT_CAPABILITY", "Message", "PARSE_ERROR", "ParseError", "RESOURCE_NOT_FOUND",
        "RequestId", "StreamError", "UNSUPPORTED_PROTOCOL_VERSION", "URL_ELICITATION_REQUIRED",
        "error", "notification", "parse", "request", "result", "serialize", "serialize_request",
    ],
    "mcpsync.manager": [
        "ManagedTool", "Manager", "Notification", "split_thread_server_id", "thread_server_id",
    ],
    "mcpsync.policy": [
        "ArgumentRule", "Budget", "Decision", "Policy", "check_call", "decide", "finish_call",
        "gateway_refusal", "tool_matches",
    ],
    "mcpsync.protocol": [
        "LATEST_LEGACY", "LATEST_MODERN", "LEGACY_VERSIONS", "LOG_LEVELS",
        "META_CLIENT_CAPABILITIES", "META_CLIENT_INFO", "META_LOG_LEVEL", "META_PROTOCOL_VERSION",
        "META_SERVER_INFO", "META_SUBSCRIPTION_ID", "MODERN_VERSIONS", "SUPPORTED_VERSIONS",
        "build_meta", "choose_legacy_version", "classify_discover_error",
        "classify_discover_result", "client_capabilities", "describe_call", "is_modern",
        "log_level_to_logging", "remote_error", "result_type", "retry_version_from_error",
        "server_info_from_result",
    ],
    "mcpsync.secrets": [
        "SECRET_FORMATS", "SecretFile", "SecretResolver", "apply_placeholders",
        "check_secret_config", "render_secret", "write_secret_file",
    ],
    "mcpsync.gateway": [
        "ApprovalDesk", "FrameObserver", "Gateway", "HeldCall", "Inspector", "Redactor",
        "Verdict", "approver_from_config", "call_digest", "wsgi",
    ],
    "mcpsync.server": [
        "Context", "Server", "ToolHandler",
    ],
    "mcpsync.session": [
        "DEFAULT_MAX_TIMEOUT", "RequestFuture", "Session", "SessionTransport",
    ],
    "mcpsync.transport": [
    ],
    "mcpsync.transport.http": [
        "HttpTransport",
    ],
    "mcpsync.transport.sse": [
        "MAX_EVENT_BYTES", "SSEDecoder", "SSEEvent", "iter_chunks", "iter_sse",
    ],
    "mcpsync.transport.stdio": [
        "StdioTransport", "TransportClosed", "WriteTimedOut", "safe_name",
    ],
    "mcpsync.types": [
        "AudioContent", "CallToolResult", "CompleteResult", "Content", "ContentBlock",
        "EmbeddedResource", "GetPromptResult", "ImageContent", "Prompt", "PromptArgument",
        "PromptMessage", "ReadResourceResult", "Resource", "ResourceContents", "ResourceLink",
        "ResourceTemplate", "Root", "ServerInfo", "TextContent", "Tool", "content_block_from_dict",
    ],
    "mcpauth": [
        "AuthError", "AuthorizationDenied", "AuthorizationServerChanged", "Challenge", "DPoPError",
        "DeviceCode", "DiscoveryError", "FileTokenStore", "InsecureURL", "IssMismatch",
        "IssuerMismatch", "KeyringTokenStore", "LoginRequired", "LoginTimeout", "MemoryTokenStore",
        "OAuthProvider", "PKCENotSupported", "RegistrationError", "ResourceMismatch",
        "StateMismatch", "Token", "TokenRequestError", "TokenStore", "TokenStoreError",
        "__version__", "client_metadata_document", "parse_challenges",
    ],
    "mcpauth.challenge": [
        "Challenge", "parse_challenges", "select_challenge",
    ],
    "mcpauth.discovery": [
        "ResourceMetadata", "ServerMetadata", "authorization_server_metadata_urls",
        "canonical_resource", "discover_authorization_server", "discover_resource",
        "legacy_authorization_server", "require_pkce_s256", "resource_covers",
        "resource_metadata_urls", "same_identifier",
    ],
    "mcpauth.dpop": [
        "DPoPKey", "DPoPProver", "ath", "check_server_supports_dpop",
    ],
    "mcpauth.errors": [
        "AuthError", "AuthorizationDenied", "AuthorizationServerChanged", "DPoPError",
        "DiscoveryError", "InsecureURL", "IssMismatch", "IssuerMismatch", "LoginRequired",
        "LoginTimeout", "PKCENotSupported", "RegistrationError", "ResourceMismatch",
        "StateMismatch", "TokenRequestError", "TokenStoreError",
    ],
    "mcpauth.flows": [
        "DeviceCode", "PendingAuthorization", "TokenEndpoint", "authorization_url",
        "client_credentials", "device_authorization", "exchange_code", "id_jag_exchange",
        "jwt_bearer", "new_pending", "parse_callback", "refresh", "run_browser_login",
    ],
    "mcpauth.provider": [
        "GRANTS", "OAuthProvider",
    ],
    "mcpauth.registration": [
        "BROWSER_GRANT_TYPES", "ClientRegistration", "DEVICE_GRANT_TYPES", "GRANT_DEVICE_CODE",
        "application_type_for", "choose_registration", "client_metadata_document",
        "dcr_auth_method", "preregistered_auth_method", "register",
    ],
    "mcpauth.tokens": [
        "FileTokenStore", "KeyringTokenStore", "MemoryTokenStore", "Token", "TokenStore",
        "credential_key", "default_token_path", "registration_key", "resource_index_key",
    ],
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_public_names_are_still_exported(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(getattr(module, "__all__", ()))
    missing = [n for n in PUBLIC[module_name] if n not in exported or not hasattr(module, n)]
    assert not missing, f"{module_name} no longer exports {missing}"


def test_every_listed_name_resolves_to_an_object() -> None:
    import mcpauth
    import mcpsync

    for package in (mcpsync, mcpauth):
        for name in PUBLIC[package.__name__]:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
