"""The plugin kernel: hook specifications, discovery and loading, typed registrations, compatibility."""
