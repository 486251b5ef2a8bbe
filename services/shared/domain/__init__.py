"""The product's rules, pure: visibility and windows, the ranking formula, Snowflake ids, counted-edge transitions."""
