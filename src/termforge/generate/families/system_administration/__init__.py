"""The system_administration families, one module each, that stay inside /app: an account audit
over passwd-style files, and applying a first-match permission policy to a tree."""
