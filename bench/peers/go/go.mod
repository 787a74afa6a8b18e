module weft.local/bench/peers/go

go 1.19
