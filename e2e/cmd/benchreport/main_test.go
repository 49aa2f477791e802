package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNum(t *testing.T) {
	assert.Equal(t, "981.4 ms", num(981.4, "ms"))
	assert.Equal(t, "2135 ms", num(2135, "ms"))
	assert.Equal(t, "16380 ms", num(16380.2, "ms"), "no exponent")
	assert.Equal(t, "123457 pods", num(123456.7, "pods"))
	assert.Equal(t, "0.638×", num(0.6381, "×"))
	assert.Equal(t, "—", num(math.NaN(), "ms"))
}
