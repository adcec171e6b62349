"""Tables over a blob archive (Iceberg): the chain stays the truth, and a table follows it, adding each committed
blob once, in offset order per chain, with the position it reached recorded in the same commit (`positions`:
what to add, pure; `iceberg`: the table through PyIceberg)."""
