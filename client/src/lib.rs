//! Redlock client for the redis-lock module (work in progress).
