"""Harbor's trial error policy, as data: which recorded exceptions leave a trial's reward valid.

Harbor 0.26 (harbor/models/trial/error_policy.py and TrialResult.reward_valid in
harbor/models/trial/result.py) classifies a failed trial by the *name* of its exception type. A
trial's reward counts only when the verifier produced rewards and every recorded exception allows
a valid reward; an exception type Harbor does not list keeps the reward valid. Both runners (the
native one and Harbor jobs read back) go through `reward_valid`, so the same trial gets the same
number whichever runner ran it.

termforge additionally sorts the trials without a valid reward into environment errors (the
environment could not be built or started: counted apart, never a 0) and other errors.
"""

from __future__ import annotations

import re

# Exception types after which Harbor keeps no reward (has_valid_reward = False).
NO_VALID_REWARD = frozenset({
    # environment and infrastructure (not graded)
    "EnvironmentStartTimeoutError", "SandboxBuildFailedError", "AgentSetupTimeoutError", "HealthcheckError",
    "SandboxLikelyOutOfMemoryError", "MemoryLimitExceededError", "SSHAccessError", "GKEExecStreamClosedError",
    "GKEPodNotFoundError", "RuntimeRequestError", "AddTestsDirError", "DownloadVerifierDirError",
    # model API failures (graded, but the reward is not the policy's)
    "ApiError", "ApiRateLimitError", "ApiInternalServerError", "ApiOverloadedError", "ApiConnectionClosedError",
    "ApiResponseStalledError", "UnknownApiError", "NetworkConnectionError", "ApiConnectionError",
    "ApiUsageLimitError", "RateLimitError", "InternalServerError", "ServiceUnavailableError", "APIConnectionError",
    "APIError", "Timeout",
    "UnsupportedModelParametersError", "BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError",
    "APIResponseValidationError", "BudgetExceededError",
    # the verifier itself failed
    "VerifierTimeoutError", "RewardFileNotFoundError", "RewardFileEmptyError", "VerifierOutputParseError",
    # configuration and cancellation
    "AgentAuthenticationError", "ModelNotFoundError", "ApiProviderResourceNotFoundError", "AuthenticationError",
    "PermissionDeniedError", "NotFoundError", "ServiceOperationsUnsupportedError", "VercelScopeError",
    "DspyImportError", "MissingExtraError", "RegradeError", "CancelledError",
    # termforge's native runner: the harness failed (never a policy's score)
    "AgentInfraError", "VerifierError", "VerifierEnvError", "BuilderInfraError",
})

# Exception types that mean the environment, not the agent or the verifier, failed.
ENVIRONMENT_EXCEPTIONS = frozenset({
    "EnvironmentStartTimeoutError", "SandboxBuildFailedError", "HealthcheckError", "SandboxLikelyOutOfMemoryError",
    "AddTestsDirError", "DownloadVerifierDirError", "RuntimeRequestError",
    # older Harbor names and termforge's native runner
    "EnvironmentBuildError", "EnvironmentStartError", "DockerBuildError", "BuildError", "ImageBuildError",
    "EnvironmentSetupError", "EnvironmentUnsupported",
})
# Harbor's docker environment raises a plain RuntimeError when `docker compose build/up` fails
# ("Docker compose command failed for environment ...", harbor/environments/docker/docker.py);
# other RuntimeErrors (a command timeout, say) are not the environment's.
_COMPOSE_FAILURE = re.compile(r"\bdocker\b|\bcompose\b", re.IGNORECASE)


def has_valid_reward(exception_type: str | None) -> bool:
    return exception_type is None or exception_type not in NO_VALID_REWARD


def reward_valid(rewards, exception_types) -> bool:
    """Harbor's TrialResult.reward_valid: rewards present and no exception that voids them."""
    if not isinstance(rewards, dict) or not rewards:
        return False
    return all(has_valid_reward(t) for t in exception_types)


def is_environment_error(exception_type: str | None, message: str | None = None) -> bool:
    if exception_type in ENVIRONMENT_EXCEPTIONS or (exception_type or "").startswith("Environment"):
        return True
    return exception_type == "RuntimeError" and bool(_COMPOSE_FAILURE.search(message or ""))
