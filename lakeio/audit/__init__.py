"""The vacuum audit table: its rows (contract), their hash chain, and the journal of rows it could not take yet."""
