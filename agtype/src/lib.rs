//! Apache AGE agtype codec.
