//! Cypher lexer, parser and compiler to SQL over AGE label tables.
