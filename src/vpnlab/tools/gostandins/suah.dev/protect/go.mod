module suah.dev/protect

go 1.17
