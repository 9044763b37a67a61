module github.com/replaysafe/replaysafe

go 1.26
