//! Connections and request dispatch; one handler file per API family.
